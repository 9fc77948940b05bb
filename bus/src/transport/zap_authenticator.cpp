#include "wsync/bus/transport/zap_authenticator.hpp"

#include <array>
#include <chrono>

#include "wsync/bus/core/log.hpp"
#include "wsync/bus/transport/curve.hpp"

namespace wsync::bus {

namespace {

// Where libzmq sends every ZAP request of a context (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
// How often the thread looks at stopping_ while no request comes.
constexpr std::chrono::milliseconds kZapPoll{100};
// A ZAP request: version, request id, domain, address, routing id, mechanism, then the mechanism's credentials.
constexpr std::size_t kZapRequestFrames = 7;

std::string text(const zmq::message_t& frame) { return std::string(frame.data<char>(), frame.size()); }

}  // namespace

tl::expected<std::unique_ptr<ZapAuthenticator>, std::string> ZapAuthenticator::start(
    zmq::context_t& context, const std::vector<std::string>& allowed) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kZapEndpoint);
    std::unique_ptr<ZapAuthenticator> authenticator(
        new ZapAuthenticator(std::move(socket), std::set<std::string>(allowed.begin(), allowed.end())));
    authenticator->thread_ = std::thread([raw = authenticator.get()] { raw->serve(); });
    return authenticator;
  } catch (const zmq::error_t& error) {
    return tl::unexpected(std::string("cannot start the ZAP handler: ") + error.what());
  }
}

ZapAuthenticator::ZapAuthenticator(zmq::socket_t&& socket, std::set<std::string> allowed)
    : socket_(std::move(socket)), allowed_(std::move(allowed)) {}

ZapAuthenticator::~ZapAuthenticator() {
  stopping_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void ZapAuthenticator::serve() {
  while (!stopping_.load(std::memory_order_acquire)) {
    std::vector<zmq::message_t> frames;
    try {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, kZapPoll) == 0) continue;
      do {
        frames.emplace_back();
        if (!socket_.recv(frames.back(), zmq::recv_flags::none)) break;
      } while (frames.back().more());
    } catch (const zmq::error_t& error) {
      if (error.num() == EINTR) continue;
      if (error.num() == ETERM) return;
      log::error("ZAP handler: {}", error.what());
      return;
    }
    // A malformed request (never sent by libzmq itself) gets a refusal all the same, so the REP socket stays in step.
    const bool wellFormed = frames.size() >= kZapRequestFrames && text(frames[0]) == "1.0";
    const std::string requestId = frames.size() > 1 ? text(frames[1]) : std::string();
    const std::string address = frames.size() > 3 ? text(frames[3]) : std::string("?");
    const std::string mechanism = frames.size() > 5 ? text(frames[5]) : std::string("?");
    std::string clientKey;
    if (wellFormed && mechanism == "CURVE" && frames[6].size() == 32) {
      char z85[kCurveKeyChars + 1];
      if (zmq_z85_encode(z85, frames[6].data<std::uint8_t>(), 32) != nullptr) clientKey = z85;
    }
    const bool admit = !clientKey.empty() && allowed_.contains(clientKey);
    if (admit) {
      admitted_.fetch_add(1, std::memory_order_relaxed);
      log::debug("admitted CURVE client {} from {}", clientKey, address);
    } else {
      refused_.fetch_add(1, std::memory_order_relaxed);
      const auto now = std::chrono::steady_clock::now();
      refusals_.flush(now);
      refusals_.warn("zap:" + address + "/" + clientKey, now, [&] {
        return "refused a connection from " + address + ": " +
               (clientKey.empty() ? "mechanism " + mechanism + ", not CURVE"
                                  : "CURVE key " + clientKey + " is not on the allowlist");
      });
    }
    const std::array<std::string, 6> reply{
        "1.0", requestId, admit ? "200" : "400", admit ? "OK" : "not on the allowlist", admit ? clientKey : "", ""};
    try {
      for (std::size_t index = 0; index < reply.size(); ++index) {
        socket_.send(zmq::buffer(reply[index]),
                     index + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& error) {
      if (error.num() == ETERM) return;
      log::error("ZAP handler: {}", error.what());
    }
  }
}

}  // namespace wsync::bus
