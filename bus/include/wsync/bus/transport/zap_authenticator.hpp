#pragma once
// The ZAP handler (ZeroMQ RFC 27) of a coordinator's context: admits CURVE clients whose public key is on the
// allowlist and refuses, with a log line naming the key and the peer's address, every other one. It answers on
// inproc://zeromq.zap.01 from its own thread for as long as it lives; start it before binding the sockets it
// guards (curve.hpp), and destroy it before the context.
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/core/log_limiter.hpp"

namespace wsync::bus {

class ZapAuthenticator {
 public:
  static tl::expected<std::unique_ptr<ZapAuthenticator>, std::string> start(zmq::context_t& context,
                                                                            const std::vector<std::string>& allowed);
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;
  ~ZapAuthenticator();

  std::uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  std::uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  ZapAuthenticator(zmq::socket_t&& socket, std::set<std::string> allowed);
  void serve();

  zmq::socket_t socket_;  // used by the thread only, once started
  const std::set<std::string> allowed_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> refused_{0};
  // A refused client may reconnect in a loop: its refusals are a few lines per interval (the handler's thread only).
  LogLimiter refusals_;
  std::thread thread_;
};

}  // namespace wsync::bus
