// The raw ZeroMQ baseline: the same socket types, options, endpoints kind (ipc://), frame shapes and sizes as the
// bus path, written as a plain cppzmq user would write it, with no encoding and no verification. The frames carry
// only the number that pairs a reply with its request.
#include <optional>
#include <string>
#include <vector>

#include <wsync/bus/transport/socket_options.hpp>
#include <wsync/bus/protocol/topics.hpp>

#include "bench_failure.hpp"
#include "bus.hpp"
#include "latency_paths.hpp"

namespace wsync::bench {
namespace {

[[noreturn]] void rethrow(const zmq::error_t& error, const std::string& what) {
  throw BenchFailure("raw: " + what + ": " + error.what());
}

// The same options as every bus socket (linger, MAXMSGSIZE, high-water marks, ZMTP heartbeats): the baseline
// must differ from the bus only by the library code, not by configuration.
zmq::socket_t makeSocket(zmq::context_t& context, zmq::socket_type type) {
  zmq::socket_t socket(context, type);
  bus::applyCommonOptions(socket);
  return socket;
}

// Waits up to `timeout` (0: just look) for `socket` to be readable, as the bus endpoints do.
bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return true;
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, timeout) > 0;
}

void checkSize(const zmq::message_t& frame, std::size_t expected, const char* what) {
  if (frame.size() != expected || frame.more()) {
    throw BenchFailure(std::string("raw: unexpected ") + what + " frame of " + std::to_string(frame.size()) +
                       " bytes (expected " + std::to_string(expected) + ", single part)");
  }
}

void sendOrThrow(zmq::socket_t& socket, zmq::const_buffer frame, zmq::send_flags flags, const char* what) {
  if (!socket.send(frame, flags | zmq::send_flags::dontwait)) {
    throw BenchFailure(std::string("raw: ") + what + " would block (peer queue full)");
  }
}

class RawCoordinator final : public CoordinatorPath {
 public:
  RawCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints)
      : router_(makeSocket(context, zmq::socket_type::router)),
        publisher_(makeSocket(context, zmq::socket_type::pub)),
        sizes_(busMessageSizes()),
        reply_(sizes_.reply),
        pause_(sizes_.pause) {
    try {
      router_.set(zmq::sockopt::router_mandatory, 1);
      router_.bind(endpoints.requests);
      publisher_.bind(endpoints.events);
    } catch (const zmq::error_t& error) {
      rethrow(error, "bind " + endpoints.requests + " / " + endpoints.events);
    }
  }

  bool answerRequest(std::chrono::milliseconds timeout) override {
    try {
      if (!waitReadable(router_, timeout)) return false;
      zmq::message_t peer;
      zmq::message_t request;
      if (!router_.recv(peer, zmq::recv_flags::dontwait)) return false;
      if (!peer.more()) throw BenchFailure("raw: request without a routing id frame");
      (void)router_.recv(request, zmq::recv_flags::none);  // a multipart message arrives whole
      checkSize(request, sizes_.request, "request");
      stampFrame(reply_, readStamp({request.data<std::uint8_t>(), request.size()}));
      if (!router_.send(peer, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        throw BenchFailure("raw: reply would block");
      }
      sendOrThrow(router_, zmq::buffer(reply_), zmq::send_flags::none, "reply");
      return true;
    } catch (const zmq::error_t& error) {
      rethrow(error, "answer request");
    }
  }

  void publishPause(std::uint64_t round) override {
    try {
      stampFrame(pause_, round);
      sendOrThrow(publisher_, zmq::buffer(pauseTopic()), zmq::send_flags::sndmore, "pause topic");
      sendOrThrow(publisher_, zmq::buffer(pause_), zmq::send_flags::none, "pause");
    } catch (const zmq::error_t& error) {
      rethrow(error, "publish pause");
    }
  }

  std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) override {
    try {
      if (!waitReadable(router_, timeout)) return std::nullopt;
      zmq::message_t peer;
      zmq::message_t ack;
      if (!router_.recv(peer, zmq::recv_flags::dontwait)) return std::nullopt;
      if (!peer.more()) throw BenchFailure("raw: ack without a routing id frame");
      (void)router_.recv(ack, zmq::recv_flags::none);
      checkSize(ack, sizes_.pauseAck, "ack");
      const auto agent = pauseAgentIndex(peer.to_string_view());
      if (!agent) throw BenchFailure("raw: ack from unknown routing id '" + peer.to_string() + "'");
      return ReceivedAck{readStamp({ack.data<std::uint8_t>(), ack.size()}), *agent};
    } catch (const zmq::error_t& error) {
      rethrow(error, "receive ack");
    }
  }

 private:
  zmq::socket_t router_;
  zmq::socket_t publisher_;
  MessageSizes sizes_;
  std::vector<std::uint8_t> reply_;
  std::vector<std::uint8_t> pause_;
};

class RawAgent final : public AgentPath {
 public:
  RawAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints, const std::string& agentId, bool subscribe)
      : dealer_(makeSocket(context, zmq::socket_type::dealer)),
        sizes_(busMessageSizes()),
        request_(sizes_.request),
        ack_(sizes_.pauseAck) {
    try {
      dealer_.set(zmq::sockopt::routing_id, agentId);
      dealer_.connect(endpoints.requests);
      if (subscribe) {
        subscriber_.emplace(makeSocket(context, zmq::socket_type::sub));
        subscriber_->set(zmq::sockopt::subscribe, std::string(bus::topics::kRound));
        subscriber_->connect(endpoints.events);
      }
    } catch (const zmq::error_t& error) {
      rethrow(error, "connect " + endpoints.requests + " / " + endpoints.events);
    }
  }

  void roundTrip(std::uint64_t seq) override {
    try {
      stampFrame(request_, seq);
      sendOrThrow(dealer_, zmq::buffer(request_), zmq::send_flags::none, "request");
      zmq::message_t reply;
      if (!waitReadable(dealer_, kReplyTimeout) || !dealer_.recv(reply, zmq::recv_flags::dontwait)) {
        throw BenchFailure("raw: no reply to request " + std::to_string(seq) + " within the timeout");
      }
      checkSize(reply, sizes_.reply, "reply");
      if (readStamp({reply.data<std::uint8_t>(), reply.size()}) != seq) {
        throw BenchFailure("raw: reply does not answer request " + std::to_string(seq));
      }
    } catch (const zmq::error_t& error) {
      rethrow(error, "round trip");
    }
  }

  zmq::socket_ref eventSocket() override {
    if (!subscriber_) throw BenchFailure("raw: this agent has no event socket");
    return *subscriber_;
  }

  void answerPendingPauses() override {
    if (!subscriber_) throw BenchFailure("raw: this agent has no event socket");
    try {
      for (;;) {
        zmq::message_t topic;
        zmq::message_t pause;
        if (!subscriber_->recv(topic, zmq::recv_flags::dontwait)) return;
        if (!topic.more()) throw BenchFailure("raw: event without a topic frame");
        (void)subscriber_->recv(pause, zmq::recv_flags::none);
        checkSize(pause, sizes_.pause, "pause");
        stampFrame(ack_, readStamp({pause.data<std::uint8_t>(), pause.size()}));
        sendOrThrow(dealer_, zmq::buffer(ack_), zmq::send_flags::none, "ack");
      }
    } catch (const zmq::error_t& error) {
      rethrow(error, "answer pause");
    }
  }

 private:
  zmq::socket_t dealer_;
  std::optional<zmq::socket_t> subscriber_;
  MessageSizes sizes_;
  std::vector<std::uint8_t> request_;
  std::vector<std::uint8_t> ack_;
};

}  // namespace

std::unique_ptr<CoordinatorPath> makeRawCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints) {
  return std::make_unique<RawCoordinator>(context, endpoints);
}

std::unique_ptr<AgentPath> makeRawAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                        const std::string& agentId, bool subscribe) {
  return std::make_unique<RawAgent>(context, endpoints, agentId, subscribe);
}

}  // namespace wsync::bench
