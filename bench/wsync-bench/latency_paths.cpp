#include "latency_paths.hpp"

#include <charconv>
#include <cstring>
#include <span>

#include <wsync/schemas/control_generated.h>
#include <wsync/bus/protocol/message.hpp>
#include <wsync/bus/protocol/topics.hpp>
#include <wsync/bus/transport/dealer_endpoint.hpp>
#include <wsync/bus/transport/event_publisher.hpp>
#include <wsync/bus/transport/event_subscriber.hpp>
#include <wsync/bus/transport/router_endpoint.hpp>
#include <wsync/bus/transport/socket_options.hpp>

#include "bench_failure.hpp"
#include "bus.hpp"

namespace wsync::bench {
namespace {

// Nonzero, so that every field is present and every message of a kind has the same size.
constexpr std::uint64_t kEpoch = 1;
constexpr std::uint64_t kVersion = 7;
const msg::Digest128 kDigest(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
const std::string kRoundTopic(bus::topics::kRound);
const std::string kPauseTopic = kRoundTopic + "pause";

std::span<const std::uint8_t> buildSnapshotRequest(bus::MessageBuilder& builder, std::uint64_t seq) {
  builder.reset();
  return builder.finish(msg::CreateSnapshotRequest(builder.fbb()), bus::EnvelopeStamp{kEpoch, seq});
}

std::span<const std::uint8_t> buildSnapshotReply(bus::MessageBuilder& builder, std::uint64_t inReplyTo) {
  builder.reset();
  auto& fbb = builder.fbb();
  const std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences{
      msg::CreateTopicSequenceDirect(fbb, kRoundTopic.c_str(), inReplyTo)};
  auto body = msg::CreateSnapshotReplyDirect(fbb, &sequences, kEpoch, kVersion, nullptr, msg::RoundPhase::Idle,
                                             inReplyTo, kVersion, msg::PauseMode::Abort, false, &kDigest);
  return builder.finish(body, bus::EnvelopeStamp{kEpoch, inReplyTo});
}

// The body only: EventPublisher::publish stamps and finishes it.
flatbuffers::Offset<msg::Pause> createPause(bus::MessageBuilder& builder, std::uint64_t round) {
  builder.reset();
  return msg::CreatePause(builder.fbb(), round, kVersion, msg::PauseMode::Wait, &kDigest);
}

std::span<const std::uint8_t> buildPauseAck(bus::MessageBuilder& builder, std::uint64_t round) {
  builder.reset();
  auto body = msg::CreatePauseAck(builder.fbb(), round, true, kVersion - 1, msg::AbortReason::None);
  return builder.finish(body, bus::EnvelopeStamp{kEpoch, round});
}

std::optional<std::size_t> pauseAgentIndex(std::string_view agentId) {
  // The bus's DealerEndpoint appends "#<nonce>" to the label; raw ZeroMQ agents use the label as it is.
  agentId = agentId.substr(0, agentId.find('#'));
  const std::size_t dash = agentId.rfind('-');
  std::size_t index = 0;
  if (dash == std::string_view::npos) return std::nullopt;
  const auto [end, error] = std::from_chars(agentId.data() + dash + 1, agentId.data() + agentId.size(), index);
  if (error != std::errc{} || end != agentId.data() + agentId.size()) return std::nullopt;
  return index;
}

// The message of a delivery, or why the library rejected it.
const bus::Message& accepted(const bus::Received& received, const char* what) {
  if (received.message) return *received.message;
  throw BenchFailure(std::string("bus: rejected ") + what + " from '" + received.source +
                     "': " + std::string(bus::toString(received.message.error())));
}

class BusCoordinator final : public CoordinatorPath {
 public:
  BusCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                 const std::optional<bus::CurveKeyPair>& curveServer)
      : router_(orThrow(bus::RouterEndpoint::bind(context, endpoints.requests, 0, curveServer),
                        "bus: bind " + endpoints.requests)),
        publisher_(orThrow(bus::EventPublisher::bind(context, endpoints.events, 0, curveServer),
                           "bus: bind " + endpoints.events)) {}

  bool answerRequest(std::chrono::milliseconds timeout) override {
    auto received = orThrow(router_.receive(timeout), "bus: receive request");
    if (!received) return false;
    const bus::Message& request = accepted(*received, "request");
    if (request.as<msg::SnapshotRequest>() == nullptr) {
      throw BenchFailure(std::string("bus: expected SnapshotRequest, got ") + bus::bodyName(request.type()));
    }
    orThrow(router_.send(received->source, buildSnapshotReply(builder_, request.seq())), "bus: send reply");
    return true;
  }

  void publishPause(std::uint64_t round) override {
    orThrow(publisher_.publish(kPauseTopic, builder_, createPause(builder_, round), kEpoch), "bus: publish pause");
  }

  std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) override {
    auto received = orThrow(router_.receive(timeout), "bus: receive ack");
    if (!received) return std::nullopt;
    const bus::Message& message = accepted(*received, "ack");
    const msg::PauseAck* ack = message.as<msg::PauseAck>();
    const auto agent = pauseAgentIndex(received->source);
    if (ack == nullptr || !ack->ok() || !agent) {
      throw BenchFailure("bus: expected an ok PauseAck from a fan-out agent, got " +
                         std::string(bus::bodyName(message.type())) + " from '" + received->source + "'");
    }
    return ReceivedAck{ack->round(), *agent};
  }

 private:
  bus::RouterEndpoint router_;
  bus::EventPublisher publisher_;
  bus::MessageBuilder builder_;
};

class BusAgent final : public AgentPath {
 public:
  BusAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints, const std::string& agentId, bool subscribe,
           const std::optional<bus::CurveClient>& curve)
      : dealer_(orThrow(bus::DealerEndpoint::connect(context, endpoints.requests, agentId, curve),
                        "bus: connect " + endpoints.requests)) {
    if (!subscribe) return;
    subscriber_.emplace(orThrow(bus::EventSubscriber::connect(context, endpoints.events, {kRoundTopic}, curve),
                                "bus: subscribe " + endpoints.events));
  }

  void roundTrip(std::uint64_t seq) override {
    orThrow(dealer_.send(buildSnapshotRequest(builder_, seq)), "bus: send request");
    auto received = orThrow(dealer_.receive(kReplyTimeout), "bus: receive reply");
    if (!received) {
      // A refused CURVE handshake is retried by ZeroMQ silently: say so rather than only "no reply".
      const auto refusal = dealer_.handshakeRefusal();
      throw BenchFailure("bus: no reply to request " + std::to_string(seq) + " within the timeout" +
                         (refusal ? ": " + *refusal : std::string()));
    }
    const bus::Message& reply = accepted(*received, "reply");
    if (reply.as<msg::SnapshotReply>() == nullptr || reply.seq() != seq) {
      throw BenchFailure("bus: expected the SnapshotReply to request " + std::to_string(seq) + ", got " +
                         bus::bodyName(reply.type()) + " " + std::to_string(reply.seq()));
    }
  }

  zmq::socket_ref eventSocket() override { return subscriber_.value().handle(); }

  void answerPendingPauses() override {
    while (auto received = orThrow(subscriber_.value().receive(std::chrono::milliseconds{0}), "bus: receive pause")) {
      const bus::Message& event = accepted(*received, "event");
      const msg::Pause* pause = event.as<msg::Pause>();
      if (pause == nullptr) throw BenchFailure(std::string("bus: expected Pause, got ") + bus::bodyName(event.type()));
      orThrow(dealer_.send(buildPauseAck(builder_, pause->round())), "bus: send ack");
    }
  }

 private:
  bus::DealerEndpoint dealer_;
  std::optional<bus::EventSubscriber> subscriber_;
  bus::MessageBuilder builder_;
};

// The raw baseline, as a cppzmq user would write it, with the bus's socket options (applyCommonOptions) and security
// options (applyCurveServer, applyCurveClient): the paths differ by the library alone. Frames carry their pairing
// number in their first 8 bytes.
zmq::socket_t rawSocket(zmq::context_t& context, zmq::socket_type type) {
  zmq::socket_t socket(context, type);
  bus::applyCommonOptions(socket);
  return socket;
}

void stamp(std::vector<std::uint8_t>& frame, std::uint64_t number) { std::memcpy(frame.data(), &number, 8); }

// One frame of `expected` bytes (after the envelope frame, if any), or nothing within `timeout` (0: just look).
std::optional<std::uint64_t> receiveRaw(zmq::socket_t& socket, std::chrono::milliseconds timeout, std::size_t expected,
                                        zmq::message_t* envelope, const char* what) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  if (timeout.count() > 0 && zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  zmq::message_t frame;
  if (envelope != nullptr) {
    if (!socket.recv(*envelope, zmq::recv_flags::dontwait)) return std::nullopt;
    if (!envelope->more()) throw BenchFailure(std::string("raw: ") + what + " without its first frame");
    (void)socket.recv(frame);  // a multipart message arrives whole
  } else if (!socket.recv(frame, zmq::recv_flags::dontwait)) {
    return std::nullopt;
  }
  if (frame.size() != expected || frame.more()) {
    throw BenchFailure(std::string("raw: ") + what + " frame of " + std::to_string(frame.size()) + " bytes, expected " +
                       std::to_string(expected));
  }
  std::uint64_t number = 0;
  std::memcpy(&number, frame.data(), 8);
  return number;
}

void sendRaw(zmq::socket_t& socket, zmq::const_buffer frame, bool more, const char* what) {
  if (!socket.send(frame, (more ? zmq::send_flags::sndmore : zmq::send_flags::none) | zmq::send_flags::dontwait)) {
    throw BenchFailure(std::string("raw: ") + what + " would block (peer queue full)");
  }
}

class RawCoordinator final : public CoordinatorPath {
 public:
  RawCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                 const std::optional<bus::CurveKeyPair>& curveServer)
      : router_(rawSocket(context, zmq::socket_type::router)),
        publisher_(rawSocket(context, zmq::socket_type::pub)),
        sizes_(busMessageSizes()),
        reply_(sizes_.reply),
        pause_(sizes_.pause) {
    router_.set(zmq::sockopt::router_mandatory, 1);
    if (curveServer) {
      bus::applyCurveServer(router_, *curveServer);
      bus::applyCurveServer(publisher_, *curveServer);
    }
    router_.bind(endpoints.requests);
    publisher_.bind(endpoints.events);
  }

  bool answerRequest(std::chrono::milliseconds timeout) override {
    zmq::message_t peer;
    const auto seq = receiveRaw(router_, timeout, sizes_.request, &peer, "request");
    if (!seq) return false;
    stamp(reply_, *seq);
    sendRaw(router_, zmq::buffer(peer.data(), peer.size()), true, "reply");
    sendRaw(router_, zmq::buffer(reply_), false, "reply");
    return true;
  }

  void publishPause(std::uint64_t round) override {
    stamp(pause_, round);
    sendRaw(publisher_, zmq::buffer(kPauseTopic), true, "pause topic");
    sendRaw(publisher_, zmq::buffer(pause_), false, "pause");
  }

  std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) override {
    zmq::message_t peer;
    const auto round = receiveRaw(router_, timeout, sizes_.pauseAck, &peer, "ack");
    if (!round) return std::nullopt;
    const auto agent = pauseAgentIndex(peer.to_string_view());
    if (!agent) throw BenchFailure("raw: ack from unknown routing id '" + peer.to_string() + "'");
    return ReceivedAck{*round, *agent};
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
  RawAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints, const std::string& agentId, bool subscribe,
           const std::optional<bus::CurveClient>& curve)
      : dealer_(rawSocket(context, zmq::socket_type::dealer)),
        sizes_(busMessageSizes()),
        request_(sizes_.request),
        ack_(sizes_.pauseAck) {
    dealer_.set(zmq::sockopt::routing_id, agentId);
    if (curve) bus::applyCurveClient(dealer_, *curve);
    dealer_.connect(endpoints.requests);
    if (!subscribe) return;
    subscriber_.emplace(rawSocket(context, zmq::socket_type::sub));
    subscriber_->set(zmq::sockopt::subscribe, kRoundTopic);
    if (curve) bus::applyCurveClient(*subscriber_, *curve);
    subscriber_->connect(endpoints.events);
  }

  void roundTrip(std::uint64_t seq) override {
    stamp(request_, seq);
    sendRaw(dealer_, zmq::buffer(request_), false, "request");
    const auto answered = receiveRaw(dealer_, kReplyTimeout, sizes_.reply, nullptr, "reply");
    if (answered != seq) throw BenchFailure("raw: no reply to request " + std::to_string(seq) + " within the timeout");
  }

  zmq::socket_ref eventSocket() override { return subscriber_.value(); }

  void answerPendingPauses() override {
    zmq::message_t topic;
    while (const auto round =
               receiveRaw(subscriber_.value(), std::chrono::milliseconds{0}, sizes_.pause, &topic, "pause")) {
      stamp(ack_, *round);
      sendRaw(dealer_, zmq::buffer(ack_), false, "ack");
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

MessageSizes busMessageSizes() {
  bus::MessageBuilder builder;
  MessageSizes sizes;
  sizes.request = buildSnapshotRequest(builder, 1).size();
  sizes.reply = buildSnapshotReply(builder, 1).size();
  sizes.pause = builder.finish(createPause(builder, 1), bus::EnvelopeStamp{kEpoch, 1}).size();  // as publish stamps it
  sizes.pauseAck = buildPauseAck(builder, 1).size();
  return sizes;
}

std::unique_ptr<CoordinatorPath> makeCoordinatorPath(Path path, zmq::context_t& context,
                                                     const bus::BusEndpoints& endpoints,
                                                     const std::optional<bus::CurveKeyPair>& curveServer) {
  if (path == Path::Bus) return std::make_unique<BusCoordinator>(context, endpoints, curveServer);
  return std::make_unique<RawCoordinator>(context, endpoints, curveServer);
}

std::unique_ptr<AgentPath> makeAgentPath(Path path, zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                         const std::string& agentId, bool subscribe,
                                         const std::optional<bus::CurveClient>& curve) {
  if (path == Path::Bus) return std::make_unique<BusAgent>(context, endpoints, agentId, subscribe, curve);
  return std::make_unique<RawAgent>(context, endpoints, agentId, subscribe, curve);
}

}  // namespace wsync::bench
