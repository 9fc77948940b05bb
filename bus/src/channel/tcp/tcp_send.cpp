// The tcp channel's sender (docs/tcp-channel.md): admits the round's receivers (tcp_admission.hpp) and streams the
// payload to each of them from the caller's tensors, every connection at its own pace, in one poll loop with the
// admission's pending handshakes. In a round of one sender every receiver's stream is the same; in a region round
// each receiver's is the segments it takes from this source (payload_stream.hpp), and only those receivers connect.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "channel/tcp/payload_stream.hpp"
#include "channel/tcp/region_digests.hpp"
#include "channel/tcp/tcp_admission.hpp"
#include "channel/tcp/tcp_socket.hpp"
#include "channel/tcp/tcp_wire.hpp"
#include "channel/tcp/transfer_watch.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using tcp::Socket;

// Receivers a wait's description names (a timeout's detail): the rest are counted.
constexpr std::size_t kNamedInWaits = 4;

// An admitted receiver: the answer (Admitted) goes out ahead of the payload, then its ack comes back.
struct Receiver {
  enum class Stage : std::uint8_t { Streaming, AwaitingAck, Done };

  Socket socket;
  std::string label;  // "receiver 'w0' (index 2, 10.0.0.7:51234)": how every error names it
  std::uint32_t index = 0;
  const tcp::PayloadStream* stream = nullptr;  // what it is sent
  Stage stage = Stage::Streaming;
  std::array<std::byte, tcp::kAnswerBytes> answer{};
  std::size_t answerLeft = tcp::kAnswerBytes;
  tcp::StreamCursor cursor;
  std::array<std::byte, tcp::kAckBytes> ack{};
  std::size_t ackRead = 0;
};

// What a send does as its receivers' streams move: digests the bytes the first receiver's send reaches (they were
// just read, so still in cache), and reports progress.
class SendTracker {
 public:
  virtual ~SendTracker() = default;
  // Receiver `index`'s stream was sent from `from` up to `to`.
  virtual void sent(std::uint32_t index, const tcp::PayloadStream& stream, std::uint64_t from, std::uint64_t to) = 0;
  // After a pass of the send loop, once every receiver is admitted: `everyone` is how far every receiver has been
  // sent.
  virtual void passed(std::uint64_t everyone) = 0;
};

// A round of one sender: one stream, one digest over it; progress after each bucket every receiver has been sent.
class WholeTracker final : public SendTracker {
 public:
  WholeTracker(const tcp::PayloadStream& stream, const TransferProgress& progress)
      : stream_(stream), progress_(progress) {}

  void sent(std::uint32_t /*index*/, const tcp::PayloadStream& /*stream*/, std::uint64_t /*from*/,
            std::uint64_t to) override {
    stream_.digestUpTo(digested_, to, digest_);
  }
  void passed(std::uint64_t everyone) override {
    const auto& bucketEnds = stream_.bucketEnds();
    const std::size_t before = reported_;
    while (reported_ < bucketEnds.size() && bucketEnds[reported_] <= everyone) ++reported_;
    if (reported_ > before && progress_) progress_(bucketEnds[reported_ - 1]);
  }
  TransferResult result() {
    stream_.digestUpTo(digested_, stream_.totalBytes(), digest_);
    return TransferResult{digest_.bytes(), digest_.digest()};
  }

 private:
  const tcp::PayloadStream& stream_;
  const TransferProgress& progress_;
  StreamDigest digest_;
  tcp::StreamCursor digested_;  // how far digest_ has read the stream
  std::size_t reported_ = 0;    // bucket ends reported
};

// A region round: a digest per segment (region_digests.hpp); progress in the source's segment bytes read, about
// every kRegionProgressBytes.
class RegionTracker final : public SendTracker {
 public:
  RegionTracker(tcp::SegmentDigests& digests, std::uint64_t total, const TransferProgress& progress)
      : digests_(digests), total_(total), progress_(progress) {}

  void sent(std::uint32_t /*index*/, const tcp::PayloadStream& stream, std::uint64_t from, std::uint64_t to) override {
    digests_.sent(stream, from, to);
  }
  void passed(std::uint64_t /*everyone*/) override {
    const std::uint64_t digested = digests_.digested();
    if (!progress_ || digested == reported_) return;
    if (digested - reported_ >= tcp::kRegionProgressBytes || digested == total_) {
      reported_ = digested;
      progress_(digested);
    }
  }

 private:
  tcp::SegmentDigests& digests_;
  const std::uint64_t total_;
  const TransferProgress& progress_;
  std::uint64_t reported_ = 0;
};

// What the sender expects of each receiver: the payload of its stream, nothing where it has none.
tcp::ExpectedPayloads expectedOf(std::span<const tcp::PayloadStream* const> streams) {
  tcp::ExpectedPayloads payloads(streams.size());
  for (std::size_t index = 0; index < streams.size(); ++index) {
    if (streams[index] != nullptr) payloads[index] = streams[index]->totalBytes();
  }
  return payloads;
}

class Sender {
 public:
  // `streams`: receiver i's, or null where receiver i takes nothing from this sender (it is not admitted).
  Sender(std::uint64_t transfer, std::vector<const tcp::PayloadStream*> streams, std::uint32_t source,
         std::span<const std::uint8_t> token, TcpListener& listener, std::string agentId, tcp::TransferWatch& watch,
         SendTracker& tracker)
      : streams_(std::move(streams)),
        agentId_(agentId),
        watch_(watch),
        tracker_(tracker),
        admission_(transfer, token, source, expectedOf(streams_), listener, std::move(agentId)),
        receivers_(streams_.size()) {
    describeWait();
  }

  // Runs until every expected receiver acknowledged its payload.
  tl::expected<void, ChannelFailure> run();
  // The connections of the receivers that are not done (after a failure), handed to the caller to keep open.
  std::vector<Socket> takeOpenConnections();

 private:
  // Receivers the admission let in this pass: from now on they are streamed to.
  void take(std::vector<tcp::AdmittedReceiver>& admitted);
  tl::expected<void, ChannelFailure> stream(Receiver& receiver);
  // The receiver spoke while it should only read, or closed: what that means for the transfer.
  tl::expected<void, ChannelFailure> readWhileStreaming(Receiver& receiver);
  tl::expected<void, ChannelFailure> readAck(Receiver& receiver);
  ChannelFailure gone(const Receiver& receiver, const std::string& how) const;
  // A call on the receiver's connection failed with `error`: PeerGone, or this side's own failure.
  ChannelFailure failed(const Receiver& receiver, int error) const;
  // What the transfer waits for, named for a timeout's or a cancel's detail: rebuilt when a receiver is admitted or
  // done, not at every pass.
  void describeWait();

  const std::vector<const tcp::PayloadStream*> streams_;
  const std::string agentId_;  // this sender's, in the Admitted answer
  tcp::TransferWatch& watch_;
  SendTracker& tracker_;
  tcp::ReceiverAdmission admission_;
  std::vector<std::optional<Receiver>> receivers_;
  std::uint32_t done_ = 0;
  std::string waiting_;
};

ChannelFailure Sender::gone(const Receiver& receiver, const std::string& how) const {
  return ChannelFailure{ChannelError::PeerGone, receiver.label + " " + how + " after " +
                                                    std::to_string(receiver.cursor.position) + " of " +
                                                    std::to_string(receiver.stream->totalBytes()) + " bytes"};
}

ChannelFailure Sender::failed(const Receiver& receiver, int error) const {
  if (tcp::meansPeerGone(error)) return gone(receiver, "is gone (" + tcp::systemText(error) + ")");
  return ChannelFailure{ChannelError::SystemError,
                        "the connection of " + receiver.label + ": " + tcp::systemText(error)};
}

std::vector<Socket> Sender::takeOpenConnections() {
  std::vector<Socket> open;
  for (auto& receiver : receivers_) {
    if (receiver && receiver->socket.valid()) open.push_back(std::move(receiver->socket));
  }
  return open;
}

void Sender::describeWait() {
  const std::uint32_t count = admission_.expected();
  std::vector<std::string> named;
  std::size_t unnamed = 0;
  auto name = [&](std::string text) {
    if (named.size() < kNamedInWaits) {
      named.push_back(std::move(text));
    } else {
      ++unnamed;
    }
  };
  if (!admission_.complete()) {
    // Those that have not connected are known by index only.
    for (const std::uint32_t index : admission_.missing()) name(std::to_string(index));
    waiting_ = "waiting for " + std::to_string(count - admission_.admitted()) + " of " + std::to_string(count) +
               " receivers to connect (indexes ";
  } else {
    // A receiver admitted in this pass is taken at its end (take()): until then its slot is empty, though the
    // admission counts it in.
    for (const auto& receiver : receivers_) {
      if (receiver && receiver->stage != Receiver::Stage::Done) name(receiver->label);
    }
    waiting_ = "sending to " + std::to_string(count - done_) + " of " + std::to_string(count) + " receivers (";
  }
  for (std::size_t at = 0; at < named.size(); ++at) waiting_ += (at == 0 ? "" : ", ") + named[at];
  if (unnamed > 0) waiting_ += " and " + std::to_string(unnamed) + " more";
  waiting_ += ")";
}

void Sender::take(std::vector<tcp::AdmittedReceiver>& admitted) {
  for (tcp::AdmittedReceiver& connection : admitted) {
    Receiver& receiver = receivers_[connection.index].emplace();
    receiver.index = connection.index;
    receiver.stream = streams_[connection.index];
    receiver.label = std::move(connection.label);
    receiver.socket = std::move(connection.socket);
    receiver.answer = tcp::encode(tcp::SenderAnswer{tcp::Admission::Admitted, tcp::Refusal::None, agentId_});
  }
  if (!admitted.empty()) describeWait();
  admitted.clear();
}

tl::expected<void, ChannelFailure> Sender::stream(Receiver& receiver) {
  std::array<iovec, tcp::kMaxIovecs> iovecs{};
  std::size_t count = 0;
  if (receiver.answerLeft > 0) {
    const std::size_t answered = receiver.answer.size() - receiver.answerLeft;
    iovecs[count++] = iovec{receiver.answer.data() + answered, receiver.answerLeft};
  }
  const tcp::PayloadStream& stream = *receiver.stream;
  count += stream.gather(receiver.cursor, kTcpChunkBytes, std::span(iovecs).subspan(count));
  msghdr message{};
  message.msg_iov = iovecs.data();
  message.msg_iovlen = count;
  const ssize_t sent = ::sendmsg(receiver.socket.fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return {};
    return tl::unexpected(failed(receiver, errno));
  }
  auto bytes = static_cast<std::uint64_t>(sent);
  const std::uint64_t ofAnswer = std::min<std::uint64_t>(bytes, receiver.answerLeft);
  receiver.answerLeft -= ofAnswer;
  bytes -= ofAnswer;
  const std::uint64_t from = receiver.cursor.position;
  stream.advance(receiver.cursor, bytes);
  tracker_.sent(receiver.index, stream, from, receiver.cursor.position);
  if (receiver.answerLeft == 0 && receiver.cursor.position == stream.totalBytes()) {
    receiver.stage = Receiver::Stage::AwaitingAck;
  }
  return {};
}

tl::expected<void, ChannelFailure> Sender::readWhileStreaming(Receiver& receiver) {
  std::byte unexpected[64];
  const ssize_t got = ::recv(receiver.socket.fd(), unexpected, sizeof unexpected, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return {};
  if (got == 0) return tl::unexpected(gone(receiver, "closed its connection"));
  if (got < 0) {
    return tl::unexpected(failed(receiver, errno));
  }
  return tl::unexpected(gone(receiver, "sent bytes before its payload ended (not a wsync tcp receiver)"));
}

tl::expected<void, ChannelFailure> Sender::readAck(Receiver& receiver) {
  const ssize_t got = ::recv(receiver.socket.fd(), receiver.ack.data() + receiver.ackRead,
                             receiver.ack.size() - receiver.ackRead, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return {};
  if (got == 0) return tl::unexpected(gone(receiver, "closed its connection before acknowledging"));
  if (got < 0) {
    return tl::unexpected(failed(receiver, errno));
  }
  receiver.ackRead += static_cast<std::size_t>(got);
  if (receiver.ackRead < receiver.ack.size()) return {};
  const auto acknowledged = tcp::decodeAck(receiver.ack);
  if (!acknowledged || *acknowledged != receiver.stream->totalBytes()) {
    return tl::unexpected(gone(receiver, "acknowledged something else than the payload"));
  }
  receiver.stage = Receiver::Stage::Done;
  receiver.socket.close();
  ++done_;
  describeWait();
  return {};
}

tl::expected<void, ChannelFailure> Sender::run() {
  if (auto listening = admission_.start(); !listening) return listening;
  std::vector<pollfd> fds;
  std::vector<std::uint32_t> polled;  // the receivers behind the last entries of fds
  std::vector<tcp::AdmittedReceiver> admitted;
  while (done_ < admission_.expected()) {
    // Polled in this order: the admission's (the listener while receivers are missing, the connections that have
    // not said hello), then the admitted receivers that are not done. Whatever joins during a pass is polled from
    // the next one.
    fds.clear();
    admission_.addPollEntries(fds);
    const std::size_t ofAdmission = fds.size();
    polled.clear();
    for (std::uint32_t index = 0; index < receivers_.size(); ++index) {
      const auto& receiver = receivers_[index];
      if (!receiver || receiver->stage == Receiver::Stage::Done) continue;
      const short events = receiver->stage == Receiver::Stage::Streaming ? POLLOUT | POLLIN : POLLIN;
      fds.push_back(pollfd{receiver->socket.fd(), events, 0});
      polled.push_back(index);
    }
    auto ready = watch_.poll(fds, waiting_);
    if (!ready) return tl::unexpected(ready.error());
    if (*ready == 0) continue;

    if (auto handled = admission_.handle(std::span(fds).first(ofAdmission), admitted); !handled) return handled;
    std::size_t at = ofAdmission;
    for (const std::uint32_t index : polled) {
      const short revents = fds[at++].revents;
      Receiver& receiver = *receivers_[index];
      if (revents == 0) continue;
      tl::expected<void, ChannelFailure> handled;
      if (receiver.stage == Receiver::Stage::AwaitingAck) {
        handled = readAck(receiver);
      } else if ((revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
        handled = readWhileStreaming(receiver);
      }
      if (handled && receiver.stage == Receiver::Stage::Streaming && (revents & POLLOUT) != 0) {
        handled = stream(receiver);
      }
      if (!handled) return handled;
    }
    take(admitted);
    if (admission_.complete()) {
      std::uint64_t everyone = std::numeric_limits<std::uint64_t>::max();
      for (const auto& receiver : receivers_) {
        if (receiver) everyone = std::min(everyone, receiver->cursor.position);
      }
      tracker_.passed(everyone);
    }
  }
  return {};
}

// Runs `sender`. On a failure the other receivers' connections stay open, in `parked`: closing them would fail each
// of them with PeerGone, and their reports would race this side's, which says what went wrong, and could blame a
// worker that did nothing. They end with the round instead (their cancel probes), and close when the channel goes.
tl::expected<void, ChannelFailure> runKeepingTheOthers(Sender& sender, std::vector<Socket>& parked) {
  auto sent = sender.run();
  if (!sent) parked = sender.takeOpenConnections();
  return sent;
}

}  // namespace

tl::expected<TransferResult, ChannelFailure> TcpChannel::send(std::uint64_t transfer, const BucketPlan& plan,
                                                              std::span<const std::span<const std::byte>> tensors,
                                                              std::uint32_t receiverCount,
                                                              std::chrono::steady_clock::time_point deadline) {
  auto stream = tcp::PayloadStream::forSending(plan, tensors);
  if (!stream) return tl::unexpected(stream.error());
  if (receiverCount > kMaxTcpReceivers) {
    return fail(ChannelError::InvalidGeometry, std::to_string(receiverCount) + " receivers: the tcp channel takes " +
                                                   std::to_string(kMaxTcpReceivers));
  }
  if (!config_.listener) {
    return fail(ChannelError::Unsupported, "this end of the tcp channel has no listener: it cannot send");
  }
  WholeTracker tracker(*stream, progress());
  if (receiverCount == 0) return tracker.result();
  parked_.clear();  // a previous transfer's: its round is over
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  Sender sender(transfer, std::vector<const tcp::PayloadStream*>(receiverCount, &*stream), 0, config_.token,
                *config_.listener, config_.agentId, watch, tracker);
  if (auto sent = runKeepingTheOthers(sender, parked_); !sent) return tl::unexpected(sent.error());
  return tracker.result();
}

tl::expected<RegionTransferResult, ChannelFailure> TcpChannel::sendRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
    std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) {
  if (!config_.listener) {
    return fail(ChannelError::Unsupported, "this end of the tcp channel has no listener: it cannot send");
  }
  if (source >= plan.sourceCount()) {
    return fail(ChannelError::PlanMismatch,
                "source " + std::to_string(source) + " of a plan of " + std::to_string(plan.sourceCount()));
  }
  if (plan.receiverCount() > kMaxTcpReceivers) {
    return fail(
        ChannelError::InvalidGeometry,
        std::to_string(plan.receiverCount()) + " receivers: the tcp channel takes " + std::to_string(kMaxTcpReceivers));
  }
  // Every receiver's stream built, and so checked against the buffers, before any byte moves.
  std::vector<std::optional<tcp::PayloadStream>> streams(plan.receiverCount());
  std::vector<const tcp::PayloadStream*> expected(plan.receiverCount(), nullptr);
  for (std::uint32_t receiver = 0; receiver < plan.receiverCount(); ++receiver) {
    if (plan.deliveries(source, receiver).empty()) continue;  // it does not connect to this source
    auto stream = tcp::PayloadStream::forRegionSource(plan, source, receiver, buffers);
    if (!stream) return tl::unexpected(stream.error());
    streams[receiver] = std::move(*stream);
    expected[receiver] = &*streams[receiver];
  }
  tcp::SegmentDigests digests(plan, source);
  if (std::all_of(expected.begin(), expected.end(), [](const auto* stream) { return stream == nullptr; })) {
    return digests.results();  // nothing for anyone: nobody connects
  }
  RegionTracker tracker(digests, plan.bytesRead(source), progress());
  parked_.clear();
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  Sender sender(transfer, std::move(expected), source, config_.token, *config_.listener, config_.agentId, watch,
                tracker);
  if (auto sent = runKeepingTheOthers(sender, parked_); !sent) return tl::unexpected(sent.error());
  return digests.results();
}

}  // namespace wsync::bus
