// socket_peer: the agent side of the socket integration tests (tests/integration/sockets_test.cpp). The test
// process plays the coordinator; this program, started as a separate process, talks to it through the bus
// library so that every message crosses a real ipc or tcp connection.
//
// Usage:
//   socket_peer dealer ENDPOINT AGENT_ID COUNT [AGENTS]
//       AGENTS dealers (default 1; ids AGENT_ID-0.. when more than one) each send Heartbeat requests with seq
//       1..COUNT, in lock step, and wait for the reply to each.
//   socket_peer subscriber EVENTS_ENDPOINT PREFIX EXPECTED_COUNT REQUESTS_ENDPOINT AGENT_ID
//       Subscribes to PREFIX. Handshake against the slow-joiner problem: the test publishes probes on topic
//       PREFIX + "probe" until this peer, having received one, says "ready" (a Heartbeat) through a DEALER to
//       REQUESTS_ENDPOINT. Afterwards it expects exactly EXPECTED_COUNT Resume events on other PREFIX topics,
//       with consecutive sequence numbers and round = 1, 2, ..., then one event on PREFIX + "end".
//   socket_peer garbage ENDPOINT AGENT_ID
//       Sends the hostile inputs listed in runGarbage() and then one honest Heartbeat (seq 1).
//   socket_peer oversized ENDPOINT AGENT_ID
//       Sends one frame of kMaxMessageBytes + 1 bytes through a raw ZeroMQ socket (the library would refuse it)
//       and waits for the receiving side to drop the connection, which MAXMSGSIZE makes it do.
//
// The reply policy of the test side, which this program checks: a verified request is answered with a Welcome
// whose agent_id is the sender and whose envelope seq echoes the request's; a rejected one with an Error
// (ProtocolMismatch for a wrong protocol version, Malformed for anything else).
//
// Exit codes:
//   0  everything went exactly as expected
//   1  usage: wrong arguments
//   2  a socket could not be set up
//   3  timed out waiting for a reply, an event or a disconnect
//   4  something arrived that was not what was expected
//   5  a send or receive failed
// On failure one line giving the reason goes to stderr.
#include <zmq.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>
#include <wsync/bus/protocol/message.hpp>
#include <wsync/bus/protocol/protocol.hpp>
#include <wsync/bus/transport/dealer_endpoint.hpp>
#include <wsync/bus/transport/event_subscriber.hpp>
#include <zmq.hpp>

namespace {

namespace bus = wsync::bus;
namespace msg = wsync::msg;
using Clock = std::chrono::steady_clock;

enum ExitCode : int {
  kOk = 0,
  kUsage = 1,
  kSetupFailed = 2,
  kTimedOut = 3,
  kUnexpected = 4,
  kTransportFailed = 5,
};

// The test process answers within milliseconds; 10 s leaves room for a loaded 2-core machine and sanitizer builds,
// and stays below the test's own bound on the peer's run, so that this program reports the reason first.
constexpr std::chrono::milliseconds kReplyTimeout{10'000};
// Between two events: the test publishes probes every few milliseconds and the whole stream after the handshake.
constexpr std::chrono::milliseconds kEventTimeout{10'000};
// The router drops the connection as soon as it has read the oversized frame's header; 10 s is for a loaded machine.
constexpr std::chrono::milliseconds kDisconnectTimeout{10'000};

// Topic suffixes of the subscriber handshake (see the usage above).
constexpr std::string_view kProbeSuffix = "probe";
constexpr std::string_view kEndSuffix = "end";

// The seq of the one honest request of `garbage`.
constexpr std::uint64_t kHonestSeq = 1;

int failWith(ExitCode code, const std::string& reason) {
  std::fprintf(stderr, "socket_peer: %s\n", reason.c_str());
  return code;
}

std::optional<std::uint64_t> parseCount(std::string_view text) {
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Waits for one delivery until `deadline`; on timeout or a socket failure, reports it and gives the exit code.
template <typename Socket>
tl::expected<bus::Received, int> receiveBefore(Socket& socket, Clock::time_point deadline, const std::string& what) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // receive(0) would only look, so a deadline that has (almost) passed counts as reached.
  if (left.count() <= 0) return tl::unexpected(failWith(kTimedOut, "timed out waiting for " + what));
  auto receiveResult = socket.receive(left);
  if (!receiveResult) return tl::unexpected(failWith(kTransportFailed, what + ": " + receiveResult.error().describe()));
  if (!*receiveResult) return tl::unexpected(failWith(kTimedOut, "timed out waiting for " + what));
  return std::move(**receiveResult);
}

std::span<const std::uint8_t> buildHeartbeat(bus::MessageBuilder& builder, std::uint64_t seq) {
  builder.reset();
  return builder.finish(msg::CreateHeartbeat(builder.fbb(), seq), bus::EnvelopeStamp{0, seq});
}

// One reply on `dealer` that must be a Welcome addressed to its routing id and echoing `seq`.
int expectWelcome(bus::DealerEndpoint& dealer, std::uint64_t seq) {
  const std::string& agentId = dealer.routingId();
  const std::string what = "reply " + std::to_string(seq) + " to " + agentId;
  auto replyResult = receiveBefore(dealer, Clock::now() + kReplyTimeout, what);
  if (!replyResult) return replyResult.error();
  if (!replyResult->message) {
    return failWith(kUnexpected, what + " was rejected: " + std::string(bus::toString(replyResult->message.error())));
  }
  const bus::Message& reply = *replyResult->message;
  const msg::Welcome* welcome = reply.as<msg::Welcome>();
  if (welcome == nullptr) {
    return failWith(kUnexpected, what + " is a " + bus::bodyName(reply.type()) + ", not a Welcome");
  }
  if (reply.seq() != seq) return failWith(kUnexpected, what + " echoes seq " + std::to_string(reply.seq()));
  const std::string addressee = welcome->agent_id() != nullptr ? welcome->agent_id()->str() : "";
  if (addressee != agentId) return failWith(kUnexpected, what + " was meant for '" + addressee + "'");
  return kOk;
}

// One reply on `dealer` that must be an Error with `code`.
int expectError(bus::DealerEndpoint& dealer, msg::ErrorCode code, const std::string& what) {
  auto replyResult = receiveBefore(dealer, Clock::now() + kReplyTimeout, what);
  if (!replyResult) return replyResult.error();
  if (!replyResult->message) {
    return failWith(kUnexpected, what + " was rejected: " + std::string(bus::toString(replyResult->message.error())));
  }
  const bus::Message& reply = *replyResult->message;
  const msg::Error* error = reply.as<msg::Error>();
  if (error == nullptr) return failWith(kUnexpected, what + " is a " + bus::bodyName(reply.type()) + ", not an Error");
  if (error->code() != code) {
    return failWith(kUnexpected, what + " has code " + msg::EnumNameErrorCode(error->code()) + ", expected " +
                                     msg::EnumNameErrorCode(code));
  }
  return kOk;
}

int runDealers(const std::string& endpoint, const std::string& agentId, std::uint64_t count, std::uint64_t agents) {
  zmq::context_t context;
  std::vector<bus::DealerEndpoint> dealers;
  std::vector<std::string> ids;
  for (std::uint64_t index = 0; index < agents; ++index) {
    ids.push_back(agents == 1 ? agentId : agentId + "-" + std::to_string(index));
    auto dealerResult = bus::DealerEndpoint::connect(context, endpoint, ids.back());
    if (!dealerResult) return failWith(kSetupFailed, ids.back() + ": " + dealerResult.error().describe());
    dealers.push_back(std::move(*dealerResult));
  }

  bus::MessageBuilder builder;
  for (std::uint64_t seq = 1; seq <= count; ++seq) {
    // All agents have a request in flight at once, so the router serves them interleaved.
    for (std::size_t index = 0; index < dealers.size(); ++index) {
      auto sendResult = dealers[index].send(buildHeartbeat(builder, seq));
      if (!sendResult) return failWith(kTransportFailed, ids[index] + ": " + sendResult.error().describe());
    }
    for (std::size_t index = 0; index < dealers.size(); ++index) {
      if (const int rc = expectWelcome(dealers[index], seq); rc != kOk) return rc;
    }
  }
  return kOk;
}

int runSubscriber(const std::string& eventsEndpoint, const std::string& prefix, std::uint64_t expected,
                  const std::string& requestsEndpoint, const std::string& agentId) {
  zmq::context_t context;
  auto subscriberResult = bus::EventSubscriber::connect(context, eventsEndpoint, {prefix});
  if (!subscriberResult) return failWith(kSetupFailed, subscriberResult.error().describe());
  auto dealerResult = bus::DealerEndpoint::connect(context, requestsEndpoint, agentId);
  if (!dealerResult) return failWith(kSetupFailed, dealerResult.error().describe());

  const std::string probeTopic = prefix + std::string(kProbeSuffix);
  const std::string endTopic = prefix + std::string(kEndSuffix);
  bus::MessageBuilder builder;
  bool ready = false;
  std::uint64_t delivered = 0;
  std::uint64_t lastSeq = 0;
  while (true) {
    auto eventResult = receiveBefore(*subscriberResult, Clock::now() + kEventTimeout,
                                     "event " + std::to_string(delivered + 1) + " of " + std::to_string(expected));
    if (!eventResult) return eventResult.error();
    const std::string& topic = eventResult->source;
    if (!eventResult->message) {
      return failWith(kUnexpected, "event on '" + topic +
                                       "' was rejected: " + std::string(bus::toString(eventResult->message.error())));
    }
    const bus::Message& event = *eventResult->message;
    if (!topic.starts_with(prefix)) return failWith(kUnexpected, "got '" + topic + "', outside '" + prefix + "'");

    if (topic == probeTopic) {
      // Probes published before the test saw "ready" may still arrive, but never after the stream began.
      if (delivered > 0) return failWith(kUnexpected, "probe after " + std::to_string(delivered) + " events");
      if (!ready) {
        auto sendResult = dealerResult->send(buildHeartbeat(builder, 1));
        if (!sendResult) return failWith(kTransportFailed, "ready: " + sendResult.error().describe());
        ready = true;
      }
      continue;
    }
    if (!ready) return failWith(kUnexpected, "first event on '" + topic + "' was not a probe");
    if (topic == endTopic) {
      if (delivered != expected) {
        return failWith(kUnexpected,
                        "end after " + std::to_string(delivered) + " of " + std::to_string(expected) + " events");
      }
      return kOk;
    }

    const msg::Resume* resume = event.as<msg::Resume>();
    if (resume == nullptr) {
      return failWith(kUnexpected, "event on '" + topic + "' is a " + bus::bodyName(event.type()) + ", not a Resume");
    }
    if (delivered > 0 && event.seq() != lastSeq + 1) {
      return failWith(kUnexpected, "gap: seq " + std::to_string(event.seq()) + " after " + std::to_string(lastSeq));
    }
    ++delivered;
    if (delivered > expected) return failWith(kUnexpected, "more than " + std::to_string(expected) + " events");
    if (resume->round() != delivered) {
      return failWith(kUnexpected,
                      "event " + std::to_string(delivered) + " carries round " + std::to_string(resume->round()));
    }
    lastSeq = event.seq();
  }
}

int runGarbage(const std::string& endpoint, const std::string& agentId) {
  zmq::context_t context;
  auto dealerResult = bus::DealerEndpoint::connect(context, endpoint, agentId);
  if (!dealerResult) return failWith(kSetupFailed, dealerResult.error().describe());
  bus::DealerEndpoint& dealer = *dealerResult;
  bus::MessageBuilder builder;

  // Each hostile input, in the order the test expects them, with the Error code the test answers it with.
  struct Hostile {
    const char* name;
    std::vector<std::vector<std::uint8_t>> frames;
    msg::ErrorCode answer;
  };
  std::vector<Hostile> inputs;

  inputs.push_back({"empty frame", std::vector<std::vector<std::uint8_t>>(1), msg::ErrorCode::Malformed});

  // Fixed seed: the same bytes on every run. Byte 4 starts the file identifier; zeroing it keeps the bytes from
  // spelling "WSYN" by chance, so the rejection is always NotWsync.
  std::mt19937 random(20240521);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> noise(64);
  for (std::uint8_t& value : noise) value = static_cast<std::uint8_t>(byte(random));
  noise[4] = 0;
  inputs.push_back({"random bytes", {noise}, msg::ErrorCode::Malformed});

  builder.reset();
  auto body = msg::CreateHeartbeat(builder.fbb(), 0);
  msg::FinishEnvelopeBuffer(
      builder.fbb(), msg::CreateEnvelope(builder.fbb(), static_cast<std::uint16_t>(bus::kProtocolVersion + 1), 0, 0, 0,
                                         msg::Body::Heartbeat, body.Union()));
  const auto otherVersion = builder.bytes();
  inputs.push_back(
      {"wrong protocol version", {{otherVersion.begin(), otherVersion.end()}}, msg::ErrorCode::ProtocolMismatch});

  // The first half keeps the root offset and the "WSYN" identifier, but the tables it points to are cut off.
  const auto valid = buildHeartbeat(builder, 0);
  inputs.push_back(
      {"truncated message", {{valid.begin(), valid.begin() + std::ssize(valid) / 2}}, msg::ErrorCode::Malformed});

  builder.reset();
  msg::FinishEnvelopeBuffer(builder.fbb(), msg::CreateEnvelope(builder.fbb(), bus::kProtocolVersion));
  const auto bodiless = builder.bytes();
  inputs.push_back({"envelope without body", {{bodiless.begin(), bodiless.end()}}, msg::ErrorCode::Malformed});

  // Two valid messages as two frames of one multipart message: the router expects exactly one payload frame.
  const auto framed = buildHeartbeat(builder, 0);
  const std::vector<std::uint8_t> framedCopy(framed.begin(), framed.end());
  inputs.push_back({"two-frame message", {framedCopy, framedCopy}, msg::ErrorCode::Malformed});

  for (const Hostile& input : inputs) {
    try {
      for (std::size_t index = 0; index < input.frames.size(); ++index) {
        const bool more = index + 1 < input.frames.size();
        const auto& frame = input.frames[index];
        if (!dealer.handle().send(
                zmq::buffer(frame.data(), frame.size()),
                more ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::dontwait)) {
          return failWith(kTransportFailed, std::string(input.name) + ": queue full");
        }
      }
    } catch (const zmq::error_t& error) {
      return failWith(kTransportFailed, std::string(input.name) + ": " + error.what());
    }
  }
  auto sendResult = dealer.send(buildHeartbeat(builder, kHonestSeq));
  if (!sendResult) return failWith(kTransportFailed, "honest request: " + sendResult.error().describe());

  // One connection keeps its order, so the answers come back in the order of the inputs.
  for (const Hostile& input : inputs) {
    if (const int rc = expectError(dealer, input.answer, std::string("answer to the ") + input.name); rc != kOk) {
      return rc;
    }
  }
  return expectWelcome(dealer, kHonestSeq);
}

int runOversized(const std::string& endpoint, const std::string& agentId) {
  // The monitor's in-process address; one peer process has one monitor.
  constexpr const char* kMonitorAddress = "inproc://socket-peer-monitor";
  zmq::context_t context;
  try {
    // A raw socket: no MAXMSGSIZE here, and nothing between us and the wire that checks the size.
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::routing_id, agentId);
    if (::zmq_socket_monitor(dealer.handle(), kMonitorAddress, ZMQ_EVENT_DISCONNECTED) != 0) {
      return failWith(kSetupFailed, std::string("monitor: ") + ::zmq_strerror(::zmq_errno()));
    }
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    // Connected before dealer.connect(), so that no disconnect can happen unseen.
    monitor.connect(kMonitorAddress);
    dealer.connect(endpoint);

    zmq::message_t giant(bus::kMaxMessageBytes + 1);
    std::memset(giant.data(), 'x', giant.size());
    // Blocking is fine: the queue of a fresh socket is empty, so this only hands the frame to ZeroMQ.
    if (!dealer.send(giant, zmq::send_flags::none)) return failWith(kTransportFailed, "oversized frame not queued");

    zmq::pollitem_t item{monitor.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, kDisconnectTimeout) == 0) {
      return failWith(kTimedOut, "the router kept the connection after an oversized frame");
    }
    // An event is two frames: [u16 event, u32 value] and the endpoint.
    zmq::message_t event;
    zmq::message_t address;
    (void)monitor.recv(event, zmq::recv_flags::none);
    (void)monitor.recv(address, zmq::recv_flags::none);
    std::uint16_t eventId = 0;
    if (event.size() >= sizeof(eventId)) std::memcpy(&eventId, event.data(), sizeof(eventId));
    if (eventId != ZMQ_EVENT_DISCONNECTED) {
      return failWith(kUnexpected, "monitor event " + std::to_string(eventId) + ", expected a disconnect");
    }
    ::zmq_socket_monitor(dealer.handle(), nullptr, 0);
  } catch (const zmq::error_t& error) {
    return failWith(kTransportFailed, error.what());
  }
  return kOk;
}

int usage() {
  return failWith(kUsage,
                  "usage: socket_peer dealer ENDPOINT AGENT_ID COUNT [AGENTS] | subscriber EVENTS_ENDPOINT PREFIX "
                  "EXPECTED_COUNT REQUESTS_ENDPOINT AGENT_ID | garbage ENDPOINT AGENT_ID | oversized ENDPOINT "
                  "AGENT_ID");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage();
  const std::string& mode = args[0];

  if (mode == "dealer" && (args.size() == 4 || args.size() == 5)) {
    const auto maybeCount = parseCount(args[3]);
    const auto maybeAgents = args.size() == 5 ? parseCount(args[4]) : std::optional<std::uint64_t>(1);
    if (!maybeCount || !maybeAgents || *maybeAgents == 0) return usage();
    return runDealers(args[1], args[2], *maybeCount, *maybeAgents);
  }
  if (mode == "subscriber" && args.size() == 6) {
    const auto maybeExpected = parseCount(args[3]);
    if (!maybeExpected) return usage();
    return runSubscriber(args[1], args[2], *maybeExpected, args[4], args[5]);
  }
  if (mode == "garbage" && args.size() == 3) return runGarbage(args[1], args[2]);
  if (mode == "oversized" && args.size() == 3) return runOversized(args[1], args[2]);
  return usage();
}
