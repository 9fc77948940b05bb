// The bus sockets across real processes: this test process plays the coordinator (RouterEndpoint, EventPublisher)
// and tests/helpers/socket_peer.cpp, started as a separate process, plays the agents. Every test runs over ipc and
// over tcp on loopback. Every wait is bounded by a named timeout, so a broken socket fails a test, never hangs it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <wsync/bus/protocol/message.hpp>
#include <wsync/bus/protocol/topics.hpp>
#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/bus/transport/event_publisher.hpp>
#include <wsync/bus/transport/event_subscriber.hpp>
#include <wsync/bus/transport/router_endpoint.hpp>
#include <wsync/cli/child_process.hpp>
#include <zmq.hpp>

#include "test_environment.hpp"

namespace wsync {
namespace {

using Clock = std::chrono::steady_clock;
using cli::ChildProcess;

// Bounds one peer's whole run. The peer gives up on each of its own waits after 10 s and says why, so this is
// longer: a hung peer is killed here, a slow one still reports its own reason first.
constexpr std::chrono::milliseconds kPeerRunTimeout{30'000};
// How long one receive waits before the serving loop looks whether the peer has exited.
constexpr std::chrono::milliseconds kServeSlice{50};
// How often probes go out while a subscriber joins; each one also bounds the wait for its "ready".
constexpr std::chrono::milliseconds kProbeInterval{20};
// Bounds the whole subscriber handshake: connecting and one probe round trip.
constexpr std::chrono::milliseconds kHandshakeTimeout{10'000};
// The router learns of a closed connection asynchronously, in ZeroMQ's I/O thread; ipc and loopback tcp report a
// close at once, so seconds are plenty on a loaded machine.
constexpr std::chrono::milliseconds kPeerGoneTimeout{10'000};
// Pause between two sends while waiting for the router to notice a closed connection.
constexpr std::chrono::milliseconds kPeerGoneRetryInterval{10};

// The coordinator's epoch stamped on replies and events; any value works, the peers do not check it.
constexpr std::uint64_t kEpoch = 7;

enum class Transport { Ipc, Tcp };

const char* toString(Transport transport) { return transport == Transport::Ipc ? "Ipc" : "Tcp"; }
std::string transportName(const testing::TestParamInfo<Transport>& info) { return toString(info.param); }
// Shown by GoogleTest as "GetParam() = Ipc" in failure messages.
void PrintTo(Transport transport, std::ostream* out) { *out << toString(transport); }

ChildProcess startPeer(const std::vector<std::string>& args) { return ChildProcess::spawn(WSYNC_SOCKET_PEER, args); }

// What the test side saw of one request.
struct Delivery {
  std::string source;
  std::optional<bus::MessageError> error;  // set when the router rejected the message
  msg::Body type = msg::Body::NONE;
  std::uint64_t seq = 0;
};

// For assertions: the rejection's name, or "accepted", so that a mismatch prints words rather than bytes.
std::string outcome(const std::optional<bus::MessageError>& maybeError) {
  return maybeError ? std::string(bus::toString(*maybeError)) : "accepted";
}

// The test process in the coordinator's role on a RouterEndpoint, answering the way socket_peer expects: a
// verified request gets a Welcome addressed to the sender and echoing its seq; a rejected one gets an Error.
class Coordinator {
 public:
  explicit Coordinator(bus::RouterEndpoint& router) : router_(router) {}

  // Waits up to `timeout` for one delivery and records it; nothing on timeout (or socket failure, which fails
  // the test).
  std::optional<bus::Received> next(std::chrono::milliseconds timeout) {
    auto receiveResult = router_.receive(timeout);
    if (!receiveResult) {
      ADD_FAILURE() << "router receive: " << receiveResult.error().describe();
      return std::nullopt;
    }
    std::optional<bus::Received>& maybeDelivery = *receiveResult;
    if (!maybeDelivery) return std::nullopt;
    Delivery summary{maybeDelivery->source, std::nullopt};
    if (maybeDelivery->message) {
      summary.type = maybeDelivery->message->type();
      summary.seq = maybeDelivery->message->seq();
    } else {
      summary.error = maybeDelivery->message.error();
    }
    deliveries_.push_back(summary);
    return std::move(maybeDelivery);
  }

  void answer(const bus::Received& delivery) {
    builder_.reset();
    flatbuffers::FlatBufferBuilder& fbb = builder_.fbb();
    std::span<const std::uint8_t> reply;
    if (delivery.message) {
      // Strings first: FlatBuffers cannot create one while a table is being built.
      const auto agentId = fbb.CreateString(delivery.source);
      msg::WelcomeBuilder welcome(fbb);
      welcome.add_agent_id(agentId);
      welcome.add_epoch(kEpoch);
      reply = builder_.finish(welcome.Finish(), bus::EnvelopeStamp{kEpoch, delivery.message->seq()});
    } else {
      const bus::MessageError error = delivery.message.error();
      const msg::ErrorCode code =
          error == bus::MessageError::ProtocolMismatch ? msg::ErrorCode::ProtocolMismatch : msg::ErrorCode::Malformed;
      const auto detail = fbb.CreateString(std::string(bus::toString(error)));
      reply = builder_.finish(msg::CreateError(fbb, code, detail, 0), bus::EnvelopeStamp{kEpoch, 0});
    }
    auto sendResult = router_.send(delivery.source, reply);
    EXPECT_TRUE(sendResult) << "answer to '" << delivery.source << "': " << sendResult.error().describe();
  }

  // Answers every request until `peer` exits; its exit status, or nothing if it still runs after `timeout`.
  std::optional<int> serveUntilExit(ChildProcess& peer, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (auto maybeDelivery = next(kServeSlice)) answer(*maybeDelivery);
      if (auto maybeStatus = peer.wait(std::chrono::milliseconds{0})) return maybeStatus;
    }
    return std::nullopt;
  }

  const std::vector<Delivery>& deliveries() const { return deliveries_; }

 private:
  bus::RouterEndpoint& router_;
  bus::MessageBuilder builder_;
  std::vector<Delivery> deliveries_;
};

// True when `routingId` belongs to a DealerEndpoint connected with `label` ("<label>#<nonce>").
bool isFrom(const std::string& routingId, const std::string& label) { return routingId.starts_with(label + "#"); }

// Builds the Welcome a send test pushes at a peer; the content does not matter, only where it goes.
std::span<const std::uint8_t> someReply(bus::MessageBuilder& builder) {
  builder.reset();
  return builder.finish(msg::CreateWelcome(builder.fbb()), bus::EnvelopeStamp{kEpoch, 0});
}

class SocketTest : public testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    if (GetParam() == Transport::Tcp) {
      // Port 0 lets the system choose; endpoint() then reports the port.
      requestsAddress_ = "tcp://127.0.0.1:*";
      eventsAddress_ = "tcp://127.0.0.1:*";
      return;
    }
    auto endpointsResult = bus::resolveEndpoints(test::uniqueBusName("sockets"));
    ASSERT_TRUE(endpointsResult) << endpointsResult.error().describe();
    requestsAddress_ = endpointsResult->requests;
    eventsAddress_ = endpointsResult->events;
  }

  // Declared first, so that it outlives every socket a test creates.
  zmq::context_t context_;
  std::string requestsAddress_;
  std::string eventsAddress_;
};

// One suite per behaviour, all on the same fixture.
using SocketRequestReplyTest = SocketTest;
using SocketRouterMandatoryTest = SocketTest;
using SocketEventsTest = SocketTest;
using SocketHostileInputTest = SocketTest;

TEST_P(SocketRequestReplyTest, RequestsAndRepliesCrossProcessesInOrder) {
  constexpr int kRequests = 20;
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;

  ChildProcess peer = startPeer({"dealer", router.endpoint(), "agent-a", std::to_string(kRequests)});
  Coordinator coordinator(router);
  // 0: the peer got a Welcome for each request, addressed to it and echoing the request's seq.
  EXPECT_EQ(coordinator.serveUntilExit(peer, kPeerRunTimeout), 0);

  const auto& deliveries = coordinator.deliveries();
  ASSERT_EQ(deliveries.size(), std::size_t{kRequests});
  for (std::size_t index = 0; index < deliveries.size(); ++index) {
    EXPECT_TRUE(isFrom(deliveries[index].source, "agent-a")) << deliveries[index].source;
    EXPECT_EQ(outcome(deliveries[index].error), "accepted");
    EXPECT_STREQ(bus::bodyName(deliveries[index].type), "Heartbeat");
    EXPECT_EQ(deliveries[index].seq, index + 1);
  }
  EXPECT_EQ(router.rejections().total(), 0U);
}

TEST_P(SocketRequestReplyTest, EveryAgentOfAProcessGetsItsOwnReplies) {
  constexpr int kAgents = 8;
  constexpr int kRequestsEach = 10;
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;

  ChildProcess peer =
      startPeer({"dealer", router.endpoint(), "fleet", std::to_string(kRequestsEach), std::to_string(kAgents)});
  Coordinator coordinator(router);
  // 0: each of the peer's dealers got every reply, addressed to it (no reply went to a sibling).
  EXPECT_EQ(coordinator.serveUntilExit(peer, kPeerRunTimeout), 0);

  ASSERT_EQ(coordinator.deliveries().size(), std::size_t{kAgents * kRequestsEach});
  for (int agent = 0; agent < kAgents; ++agent) {
    const std::string id = "fleet-" + std::to_string(agent);
    std::vector<std::uint64_t> seqs;
    for (const Delivery& delivery : coordinator.deliveries()) {
      if (isFrom(delivery.source, id)) seqs.push_back(delivery.seq);
    }
    std::vector<std::uint64_t> expected;
    for (std::uint64_t seq = 1; seq <= kRequestsEach; ++seq) expected.push_back(seq);
    EXPECT_EQ(seqs, expected) << id;
  }
  EXPECT_EQ(router.rejections().total(), 0U);
}

TEST_P(SocketRouterMandatoryTest, SendToUnknownRoutingIdFailsWhileKnownPeerIsServed) {
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;
  ChildProcess peer = startPeer({"dealer", router.endpoint(), "agent-known", "1"});
  Coordinator coordinator(router);

  // Once its request is here, the known peer is in the router's table; the unknown id must still fail.
  auto maybeRequest = coordinator.next(kPeerRunTimeout);
  ASSERT_TRUE(maybeRequest) << "the peer's request never arrived";
  bus::MessageBuilder builder;
  auto unknownResult = router.send("agent-unknown", someReply(builder));
  ASSERT_FALSE(unknownResult) << "a send to an unknown routing id was silently dropped";
  EXPECT_EQ(unknownResult.error().code, bus::TransportError::PeerUnreachable) << unknownResult.error().describe();

  coordinator.answer(*maybeRequest);
  EXPECT_EQ(coordinator.serveUntilExit(peer, kPeerRunTimeout), 0);
}

TEST_P(SocketRouterMandatoryTest, SendToExitedPeerFailsWithPeerUnreachable) {
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;
  ChildProcess peer = startPeer({"dealer", router.endpoint(), "agent-gone", "1"});
  Coordinator coordinator(router);
  ASSERT_EQ(coordinator.serveUntilExit(peer, kPeerRunTimeout), 0);
  ASSERT_FALSE(coordinator.deliveries().empty());
  const std::string goneId = coordinator.deliveries().front().source;
  ASSERT_TRUE(isFrom(goneId, "agent-gone")) << goneId;

  // Sends may still succeed until the router has processed the close; after that every one must fail.
  bus::MessageBuilder builder;
  const auto deadline = Clock::now() + kPeerGoneTimeout;
  while (true) {
    auto sendResult = router.send(goneId, someReply(builder));
    if (!sendResult) {
      EXPECT_EQ(sendResult.error().code, bus::TransportError::PeerUnreachable) << sendResult.error().describe();
      break;
    }
    ASSERT_TRUE(Clock::now() < deadline) << "sends to an exited peer still succeed";
    std::this_thread::sleep_for(kPeerGoneRetryInterval);
  }
}

TEST_P(SocketEventsTest, SubscriberGetsOnlyItsPrefixWithConsecutiveSequence) {
  constexpr int kEvents = 50;
  const std::string prefix(bus::topics::kRound);
  // Topics the subscriber must not see, near misses of the prefix included.
  const std::vector<std::string> otherTopics = {std::string(bus::topics::kAgent) + "joined",
                                                std::string(bus::topics::kBus) + "started", "round", "rounds/begin",
                                                "Round/begin"};

  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;
  auto publisherResult = bus::EventPublisher::bind(context_, eventsAddress_);
  ASSERT_TRUE(publisherResult) << publisherResult.error().describe();
  bus::EventPublisher& publisher = *publisherResult;
  ChildProcess peer =
      startPeer({"subscriber", publisher.endpoint(), prefix, std::to_string(kEvents), router.endpoint(), "listener"});

  bus::MessageBuilder builder;
  auto publishResume = [&](const std::string& topic, std::uint64_t round) {
    builder.reset();
    auto seqResult = publisher.publish(topic, builder, msg::CreateResume(builder.fbb(), round, round), kEpoch);
    EXPECT_TRUE(seqResult) << topic << ": " << seqResult.error().describe();
  };

  // Slow joiner: PUB drops what it publishes before the subscription has reached it, so probe until the peer
  // says it has received one.
  const auto deadline = Clock::now() + kHandshakeTimeout;
  bool ready = false;
  while (!ready) {
    ASSERT_TRUE(Clock::now() < deadline) << "the subscriber never reported ready";
    ASSERT_EQ(peer.wait(std::chrono::milliseconds{0}), std::nullopt) << "the subscriber exited during the handshake";
    publishResume(prefix + "probe", 0);
    auto receiveResult = router.receive(kProbeInterval);
    ASSERT_TRUE(receiveResult) << receiveResult.error().describe();
    const std::optional<bus::Received>& maybeReady = *receiveResult;
    ready = maybeReady && isFrom(maybeReady->source, "listener") && maybeReady->message;
  }

  for (const std::string& topic : otherTopics) publishResume(topic, 0);
  const std::uint64_t firstSeq = publisher.lastSequence(prefix) + 1;
  for (std::uint64_t round = 1; round <= kEvents; ++round) publishResume(prefix + "resume", round);
  EXPECT_EQ(publisher.lastSequence(prefix), firstSeq + kEvents - 1);
  for (const std::string& topic : otherTopics) publishResume(topic, 0);
  publishResume(prefix + "end", 0);

  // 0: the peer saw exactly kEvents events under the prefix, consecutive, then the end, and no other topic.
  EXPECT_EQ(peer.wait(kPeerRunTimeout), 0);
}

// Events are numbered per topic family: a subscriber to "round/" sees 1, 2, 3 ... although "agent/" events are
// published in between, so a gap it sees is a real drop, never a filtered-out event.
TEST_P(SocketEventsTest, SequencesAreNumberedPerTopicFamily) {
  constexpr std::uint64_t kRounds = 20;
  auto publisherResult = bus::EventPublisher::bind(context_, eventsAddress_);
  ASSERT_TRUE(publisherResult) << publisherResult.error().describe();
  bus::EventPublisher& publisher = *publisherResult;
  const std::string roundFamily(bus::topics::kRound);
  auto subscriberResult = bus::EventSubscriber::connect(context_, publisher.endpoint(), {roundFamily});
  ASSERT_TRUE(subscriberResult) << subscriberResult.error().describe();
  bus::EventSubscriber& subscriber = *subscriberResult;

  bus::MessageBuilder builder;
  auto publish = [&](const std::string& topic) {
    builder.reset();
    auto seqResult = publisher.publish(topic, builder, msg::CreateResume(builder.fbb()), kEpoch);
    EXPECT_TRUE(seqResult) << topic << ": " << seqResult.error().describe();
    return seqResult.value_or(0);
  };
  // Slow joiner: probe until the subscription is in place, then drain the probes.
  const auto deadline = Clock::now() + kHandshakeTimeout;
  std::uint64_t lastProbe = 0;
  for (bool joined = false; !joined;) {
    ASSERT_TRUE(Clock::now() < deadline) << "the subscription never took effect";
    lastProbe = publish(roundFamily + "probe");
    auto received = subscriber.receive(kProbeInterval);
    ASSERT_TRUE(received) << received.error().describe();
    joined = received->has_value();
  }
  for (auto drained = subscriber.receive(kProbeInterval); drained && *drained;
       drained = subscriber.receive(kProbeInterval)) {}

  for (std::uint64_t round = 1; round <= kRounds; ++round) {
    EXPECT_EQ(publish(roundFamily + "commit"), lastProbe + round);
    EXPECT_EQ(publish(std::string(bus::topics::kAgent) + "joined"), round);
  }
  EXPECT_EQ(publisher.lastSequence(roundFamily), lastProbe + kRounds);
  EXPECT_EQ(publisher.lastSequence(bus::topics::kAgent), kRounds);
  EXPECT_EQ(publisher.lastSequence("unused/"), 0U);
  EXPECT_EQ(publisher.published(), lastProbe + 2 * kRounds);

  for (std::uint64_t round = 1; round <= kRounds; ++round) {
    auto received = subscriber.receive(kHandshakeTimeout);
    ASSERT_TRUE(received && *received) << "event " << round << " never arrived";
    ASSERT_TRUE((*received)->message) << bus::toString((*received)->message.error());
    EXPECT_EQ((*received)->source, roundFamily + "commit");
    EXPECT_EQ((*received)->message->seq(), lastProbe + round) << "a gap where nothing was dropped";
  }
}

TEST(TopicFamily, IsThePrefixUpToTheFirstSlash) {
  EXPECT_EQ(bus::topics::familyOf("round/pause"), "round/");
  EXPECT_EQ(bus::topics::familyOf("round/a/b"), "round/");
  EXPECT_EQ(bus::topics::familyOf("round"), "round");
  EXPECT_EQ(bus::topics::familyOf(""), "");
}

TEST_P(SocketHostileInputTest, EachBadFrameIsRejectedCountedAndAnswered) {
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;
  ChildProcess peer = startPeer({"garbage", router.endpoint(), "intruder"});
  Coordinator coordinator(router);
  // 0: the peer got an Error for each bad input, then the Welcome for its honest request.
  EXPECT_EQ(coordinator.serveUntilExit(peer, kPeerRunTimeout), 0);

  // In the order socket_peer sends them (runGarbage); nullopt: the honest Heartbeat.
  const std::vector<std::optional<bus::MessageError>> expected = {bus::MessageError::Empty,
                                                                  bus::MessageError::NotWsync,
                                                                  bus::MessageError::ProtocolMismatch,
                                                                  bus::MessageError::Unverifiable,
                                                                  bus::MessageError::MissingBody,
                                                                  bus::MessageError::BadFraming,
                                                                  std::nullopt};
  const auto& deliveries = coordinator.deliveries();
  ASSERT_EQ(deliveries.size(), expected.size());
  for (std::size_t index = 0; index < expected.size(); ++index) {
    EXPECT_TRUE(isFrom(deliveries[index].source, "intruder")) << "delivery " << index;
    EXPECT_EQ(outcome(deliveries[index].error), outcome(expected[index])) << "delivery " << index;
  }
  EXPECT_STREQ(bus::bodyName(deliveries.back().type), "Heartbeat");
  EXPECT_EQ(deliveries.back().seq, 1U);

  const bus::RejectionCounters& rejections = router.rejections();
  for (std::size_t index = 0; index + 1 < expected.size(); ++index) {
    EXPECT_EQ(rejections.of(*expected[index]), 1U) << bus::toString(*expected[index]);
  }
  EXPECT_EQ(rejections.total(), expected.size() - 1);
}

TEST_P(SocketHostileInputTest, OversizedFrameDropsOnlyThatConnection) {
  auto routerResult = bus::RouterEndpoint::bind(context_, requestsAddress_);
  ASSERT_TRUE(routerResult) << routerResult.error().describe();
  bus::RouterEndpoint& router = *routerResult;
  Coordinator coordinator(router);

  ChildProcess giant = startPeer({"oversized", router.endpoint(), "giant"});
  // 0: the peer saw its connection dropped. The router delivers nothing of the frame, not even a rejection.
  EXPECT_EQ(coordinator.serveUntilExit(giant, kPeerRunTimeout), 0);
  EXPECT_TRUE(coordinator.deliveries().empty());
  EXPECT_EQ(router.rejections().total(), 0U);

  ChildProcess honest = startPeer({"dealer", router.endpoint(), "agent-after", "3"});
  EXPECT_EQ(coordinator.serveUntilExit(honest, kPeerRunTimeout), 0);
  ASSERT_EQ(coordinator.deliveries().size(), 3U);
  for (const Delivery& delivery : coordinator.deliveries()) {
    EXPECT_TRUE(isFrom(delivery.source, "agent-after")) << delivery.source;
    EXPECT_EQ(outcome(delivery.error), "accepted");
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, SocketRequestReplyTest, testing::Values(Transport::Ipc, Transport::Tcp),
                         transportName);
INSTANTIATE_TEST_SUITE_P(Transports, SocketRouterMandatoryTest, testing::Values(Transport::Ipc, Transport::Tcp),
                         transportName);
INSTANTIATE_TEST_SUITE_P(Transports, SocketEventsTest, testing::Values(Transport::Ipc, Transport::Tcp), transportName);
INSTANTIATE_TEST_SUITE_P(Transports, SocketHostileInputTest, testing::Values(Transport::Ipc, Transport::Tcp),
                         transportName);

}  // namespace
}  // namespace wsync
