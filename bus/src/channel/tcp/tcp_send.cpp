// The tcp channel's sender (docs/tcp-channel.md): listens for the length of the admission, admits the round's
// receivers (every pending handshake polled at once, each within kTcpHelloDeadline), and streams the payload to each
// of them from the caller's tensors, every connection at its own pace in one poll loop.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "channel/tcp/payload_stream.hpp"
#include "channel/tcp/tcp_socket.hpp"
#include "channel/tcp/tcp_wire.hpp"
#include "channel/tcp/transfer_watch.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using tcp::Socket;

// Refused connections logged per transfer; the rest are counted in one line at the end.
constexpr int kLoggedRefusals = 5;
// Receivers a wait's description names (a timeout's detail): the rest are counted.
constexpr std::size_t kNamedInWaits = 4;

// A connection accepted during the admission that has not said all of its hello yet.
struct Pending {
  Socket socket;
  Clock::time_point deadline;  // dropped past it (kTcpHelloDeadline after its accept)
  std::array<std::byte, tcp::kHelloBytes> hello{};
  std::size_t helloRead = 0;
};

// An admitted receiver: the answer (Admitted) goes out ahead of the payload, then its ack comes back.
struct Receiver {
  enum class Stage : std::uint8_t { Streaming, AwaitingAck, Done };

  Socket socket;
  std::string label;  // "receiver 'w0' (index 2, 10.0.0.7:51234)": how every error names it
  Stage stage = Stage::Streaming;
  std::array<std::byte, tcp::kAnswerBytes> answer{};
  std::size_t answerLeft = tcp::kAnswerBytes;
  tcp::StreamCursor cursor;
  std::array<std::byte, tcp::kAckBytes> ack{};
  std::size_t ackRead = 0;
};

// A receiver by the agent id its hello gave, its index and its address; by index and address when it gave none.
std::string receiverLabel(std::uint32_t index, const std::string& agentId, const std::string& address) {
  if (agentId.empty()) return "receiver " + std::to_string(index) + " (" + address + ")";
  return "receiver '" + agentId + "' (index " + std::to_string(index) + ", " + address + ")";
}

bool sameToken(const tcp::AdmissionToken& presented, std::span<const std::uint8_t> expected) {
  // Compared in constant time: how long a refusal takes says nothing of how much of a guess was right.
  std::uint8_t difference = 0;
  for (std::size_t index = 0; index < presented.size(); ++index) {
    difference = static_cast<std::uint8_t>(difference | (presented[index] ^ expected[index]));
  }
  return difference == 0;
}

// Listening for as long as it lives: a send that returns, however, leaves the port refusing connections.
class ListeningWindow {
 public:
  explicit ListeningWindow(TcpListener& listener) : listener_(listener) {}
  ~ListeningWindow() { listener_.stopListening(); }
  ListeningWindow(const ListeningWindow&) = delete;
  ListeningWindow& operator=(const ListeningWindow&) = delete;

 private:
  TcpListener& listener_;
};

class Sender {
 public:
  Sender(std::uint64_t transfer, const tcp::PayloadStream& stream, std::span<const std::uint8_t> token,
         std::uint32_t receiverCount, TcpListener& listener, std::string agentId, tcp::TransferWatch& watch,
         StreamDigest& digest)
      : transfer_(transfer),
        stream_(stream),
        token_(token),
        listener_(listener),
        agentId_(std::move(agentId)),
        watch_(watch),
        digest_(digest),
        receivers_(receiverCount) {
    describeWait();
  }
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Runs until every receiver acknowledged the payload; `progress` gets the bytes every receiver has been sent,
  // after each bucket.
  tl::expected<void, ChannelFailure> run(const TransferProgress& progress);
  // The connections of the receivers that are not done (after a failure), handed to the caller to keep open.
  std::vector<Socket> takeOpenConnections();

 private:
  // Accepts what the listener holds (at most kMaxTcpPendingHandshakes a pass: a flood cannot hold the loop here),
  // making room by dropping the oldest pending connection when there are too many or no descriptor is left.
  tl::expected<void, ChannelFailure> acceptAll();
  // Pending connections whose deadline passed, dropped.
  void dropLate(Clock::time_point now);
  // Every receiver is admitted: nobody else may connect, and whoever is still saying hello is not one of them.
  void closeAdmission();
  // Reads a connection's hello; once whole, admits it as its receiver (taking its socket) or answers why not and
  // closes it. A connection left without a socket is finished with.
  void readHello(Pending& connection);
  void refuse(Pending& connection, tcp::Admission admission, tcp::Refusal refusal, const std::string& why);
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

  std::uint64_t transfer_;
  const tcp::PayloadStream& stream_;
  std::span<const std::uint8_t> token_;
  TcpListener& listener_;
  const std::string agentId_;  // this sender's, in every answer
  tcp::TransferWatch& watch_;
  StreamDigest& digest_;
  tcp::StreamCursor digested_;  // how far digest_ has read the stream
  std::vector<std::optional<Receiver>> receivers_;
  std::deque<Pending> pending_;  // oldest first
  std::uint32_t admitted_ = 0;
  std::uint32_t done_ = 0;
  std::string waiting_;
  int refusals_ = 0;
  std::uint64_t late_ = 0;       // dropped without a whole hello by their deadline
  std::uint64_t displaced_ = 0;  // dropped for a newer connection's room
};

Sender::~Sender() {
  if (refusals_ > kLoggedRefusals) {
    log::warn("tcp transfer {}: {} more connections refused", transfer_, refusals_ - kLoggedRefusals);
  }
  if (late_ > 0) {
    log::warn("tcp transfer {}: dropped {} connections that presented no whole hello within {} ms", transfer_, late_,
              kTcpHelloDeadline.count());
  }
  if (displaced_ > 0) {
    log::warn("tcp transfer {}: dropped {} connections before their hello to make room (at most {} wait at once)",
              transfer_, displaced_, kMaxTcpPendingHandshakes);
  }
}

ChannelFailure Sender::gone(const Receiver& receiver, const std::string& how) const {
  return ChannelFailure{ChannelError::PeerGone, receiver.label + " " + how + " after " +
                                                    std::to_string(receiver.cursor.position) + " of " +
                                                    std::to_string(stream_.totalBytes()) + " bytes"};
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
  const auto count = static_cast<std::uint32_t>(receivers_.size());
  std::vector<std::string> named;
  std::size_t unnamed = 0;
  auto name = [&](std::string text) {
    if (named.size() < kNamedInWaits) {
      named.push_back(std::move(text));
    } else {
      ++unnamed;
    }
  };
  if (admitted_ < count) {
    // Those that have not connected are known by index only.
    for (std::uint32_t index = 0; index < count; ++index) {
      if (!receivers_[index]) name(std::to_string(index));
    }
    waiting_ = "waiting for " + std::to_string(count - admitted_) + " of " + std::to_string(count) +
               " receivers to connect (indexes ";
  } else {
    for (const auto& receiver : receivers_) {
      if (receiver->stage != Receiver::Stage::Done) name(receiver->label);
    }
    waiting_ = "sending to " + std::to_string(count - done_) + " of " + std::to_string(count) + " receivers (";
  }
  for (std::size_t at = 0; at < named.size(); ++at) waiting_ += (at == 0 ? "" : ", ") + named[at];
  if (unnamed > 0) waiting_ += " and " + std::to_string(unnamed) + " more";
  waiting_ += ")";
}

tl::expected<void, ChannelFailure> Sender::acceptAll() {
  for (std::size_t accepted = 0; accepted < kMaxTcpPendingHandshakes; ++accepted) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      // A signal, or a connection that failed before it was accepted (accept(2) says to retry on these).
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == EPERM || tcp::meansPeerGone(errno) ||
          errno == ENETDOWN || errno == EHOSTDOWN || errno == ENONET || errno == ENOPROTOOPT || errno == EOPNOTSUPP) {
        continue;
      }
      // Out of descriptors: those the pending strangers hold are this transfer's to take back.
      if ((errno == EMFILE || errno == ENFILE) && !pending_.empty()) {
        pending_.pop_front();
        ++displaced_;
        continue;
      }
      // Out of memory, or a broken listener: it stays readable, and the transfer cannot go on.
      return fail(ChannelError::SystemError, "accepting a receiver's connection: " + tcp::systemText(errno));
    }
    if (pending_.size() >= kMaxTcpPendingHandshakes) {
      pending_.pop_front();
      ++displaced_;
    }
    Pending connection{Socket(fd), Clock::now() + kTcpHelloDeadline};
    connection.socket.sendSmallFramesAtOnce();
    pending_.push_back(std::move(connection));
  }
  return {};
}

void Sender::dropLate(Clock::time_point now) {
  late_ += std::erase_if(pending_, [&](const Pending& connection) { return now >= connection.deadline; });
}

void Sender::closeAdmission() {
  listener_.stopListening();
  // Not one of this transfer's receivers, which are all in: a stranger, or a receiver of a later transfer (which
  // connects again after its refusal).
  pending_.clear();
}

void Sender::refuse(Pending& connection, tcp::Admission admission, tcp::Refusal refusal, const std::string& why) {
  if (admission == tcp::Admission::Refused) {
    if (++refusals_ <= kLoggedRefusals) {
      log::warn("tcp transfer {}: refused a connection from {}: {}", transfer_, connection.socket.peerName(), why);
    }
  } else {
    log::debug("tcp transfer {}: {} connected early: {}", transfer_, connection.socket.peerName(), why);
  }
  const auto answer = tcp::encode(tcp::SenderAnswer{admission, refusal, agentId_});
  // A fresh connection's send buffer is empty: these bytes go at once or the peer is gone, which is its business.
  (void)::send(connection.socket.fd(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  connection.socket.close();
}

void Sender::readHello(Pending& connection) {
  const std::size_t before = connection.helloRead;
  const ssize_t got = ::recv(connection.socket.fd(), connection.hello.data() + connection.helloRead,
                             connection.hello.size() - connection.helloRead, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (got <= 0) {
    connection.socket.close();  // gone before it said hello: it was not a receiver of this transfer yet
    return;
  }
  connection.helloRead += static_cast<std::size_t>(got);
  if (before < tcp::kHelloPrefixBytes && connection.helloRead >= tcp::kHelloPrefixBytes) {
    // Known from the first 12 bytes: a stranger, or a receiver of another wire version, is not waited for.
    const auto version = tcp::helloWireVersion(std::span(connection.hello).first<tcp::kHelloPrefixBytes>());
    if (!version) {
      if (++refusals_ <= kLoggedRefusals) {
        log::warn("tcp transfer {}: dropped a connection from {}: not a wsync tcp receiver", transfer_,
                  connection.socket.peerName());
      }
      connection.socket.close();
      return;
    }
    if (*version != tcp::kWireVersion) {
      const std::string why =
          "it speaks wire version " + std::to_string(*version) + ", this sender " + std::to_string(tcp::kWireVersion);
      refuse(connection, tcp::Admission::Refused, tcp::Refusal::WireVersion, why);
      return;
    }
  }
  if (connection.helloRead < connection.hello.size()) return;

  const auto hello = tcp::decodeHello(connection.hello);
  if (!hello) {
    refuse(connection, tcp::Admission::Refused, tcp::Refusal::AgentId, "its agent id's length is out of range");
    return;
  }
  if (hello->transfer > transfer_) {
    refuse(connection, tcp::Admission::Later, tcp::Refusal::None,
           "it asks for transfer " + std::to_string(hello->transfer) + ", this is " + std::to_string(transfer_));
    return;
  }
  if (hello->transfer < transfer_) {
    refuse(connection, tcp::Admission::Refused, tcp::Refusal::Stale,
           "it asks for transfer " + std::to_string(hello->transfer) + ", this is " + std::to_string(transfer_));
    return;
  }
  if (!sameToken(hello->token, token_)) {
    refuse(connection, tcp::Admission::Refused, tcp::Refusal::Token, "its token is not this round's");
    return;
  }
  if (!hello->agentId.empty()) {
    if (auto problem = checkAgentId(hello->agentId); !problem.empty()) {
      refuse(connection, tcp::Admission::Refused, tcp::Refusal::AgentId, "its agent id: " + problem);
      return;
    }
  }
  const std::string label = receiverLabel(hello->receiver, hello->agentId, connection.socket.peerName());
  if (hello->receiver >= receivers_.size() || receivers_[hello->receiver].has_value()) {
    refuse(connection, tcp::Admission::Refused, tcp::Refusal::Receiver,
           label + ": index " + std::to_string(hello->receiver) + " of " + std::to_string(receivers_.size()) +
               (hello->receiver < receivers_.size() ? " is taken by " + receivers_[hello->receiver]->label
                                                    : " is out of range"));
    return;
  }
  if (hello->payloadBytes != stream_.totalBytes()) {
    refuse(connection, tcp::Admission::Refused, tcp::Refusal::PayloadBytes,
           label + " expects " + std::to_string(hello->payloadBytes) + " bytes, this transfer moves " +
               std::to_string(stream_.totalBytes()));
    return;
  }
  Receiver& receiver = receivers_[hello->receiver].emplace();
  receiver.label = label;
  receiver.socket = std::move(connection.socket);
  receiver.answer = tcp::encode(tcp::SenderAnswer{tcp::Admission::Admitted, tcp::Refusal::None, agentId_});
  ++admitted_;
  describeWait();
  log::debug("tcp transfer {}: {} connected", transfer_, receiver.label);
}

tl::expected<void, ChannelFailure> Sender::stream(Receiver& receiver) {
  std::array<iovec, tcp::kMaxIovecs> iovecs{};
  std::size_t count = 0;
  if (receiver.answerLeft > 0) {
    const std::size_t answered = receiver.answer.size() - receiver.answerLeft;
    iovecs[count++] = iovec{receiver.answer.data() + answered, receiver.answerLeft};
  }
  count += stream_.gather(receiver.cursor, kTcpChunkBytes, std::span(iovecs).subspan(count));
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
  stream_.advance(receiver.cursor, bytes);
  // Digested once, by whichever receiver's send reached the bytes first: they were just read, so still in cache.
  stream_.digestUpTo(digested_, receiver.cursor.position, digest_);
  if (receiver.answerLeft == 0 && receiver.cursor.position == stream_.totalBytes()) {
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
  if (!acknowledged || *acknowledged != stream_.totalBytes()) {
    return tl::unexpected(gone(receiver, "acknowledged something else than the payload"));
  }
  receiver.stage = Receiver::Stage::Done;
  receiver.socket.close();
  ++done_;
  describeWait();
  return {};
}

tl::expected<void, ChannelFailure> Sender::run(const TransferProgress& progress) {
  if (auto listening = listener_.startListening(); !listening) return listening;
  const ListeningWindow window(listener_);
  const auto& bucketEnds = stream_.bucketEnds();
  std::size_t bucketsReported = 0;
  std::vector<pollfd> fds;
  std::vector<std::uint32_t> polled;  // the receivers behind the last entries of fds
  while (done_ < receivers_.size()) {
    // Polled in this order: the listener while receivers are missing, the connections that have not said hello,
    // the admitted receivers that are not done. Whatever joins during a pass is polled from the next one.
    dropLate(Clock::now());
    fds.clear();
    const bool listening = listener_.listening();
    if (listening) fds.push_back(pollfd{listener_.fd(), POLLIN, 0});
    for (const Pending& connection : pending_) fds.push_back(pollfd{connection.socket.fd(), POLLIN, 0});
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

    std::size_t at = listening ? 1 : 0;
    for (Pending& connection : pending_) {
      if (fds[at++].revents != 0) readHello(connection);
    }
    std::erase_if(pending_, [](const Pending& connection) { return !connection.socket.valid(); });
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
    if (listening && (fds[0].revents & POLLIN) != 0) {
      if (auto accepted = acceptAll(); !accepted) return accepted;
    }
    if (admitted_ == receivers_.size() && listener_.listening()) closeAdmission();
    if (bucketsReported < bucketEnds.size() && admitted_ == receivers_.size()) {
      std::uint64_t everyone = stream_.totalBytes();
      for (const auto& receiver : receivers_) everyone = std::min(everyone, receiver->cursor.position);
      const std::size_t before = bucketsReported;
      while (bucketsReported < bucketEnds.size() && bucketEnds[bucketsReported] <= everyone) ++bucketsReported;
      if (bucketsReported > before && progress) progress(bucketEnds[bucketsReported - 1]);
    }
  }
  stream_.digestUpTo(digested_, stream_.totalBytes(), digest_);
  return {};
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
  StreamDigest digest;
  tcp::StreamCursor digested;
  if (receiverCount == 0) {
    stream->digestUpTo(digested, stream->totalBytes(), digest);
    return TransferResult{digest.bytes(), digest.digest()};
  }
  parked_.clear();  // a previous transfer's: its round is over
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  Sender sender(transfer, *stream, config_.token, receiverCount, *config_.listener, config_.agentId, watch, digest);
  if (auto sent = sender.run(progress()); !sent) {
    // The other receivers' connections stay open: closing them would fail each of them with PeerGone, and their
    // reports would race this side's, which says what went wrong, and could blame a worker that did nothing. They
    // end with the round instead (their cancel probes), and these close when this channel goes.
    parked_ = sender.takeOpenConnections();
    return tl::unexpected(sent.error());
  }
  return TransferResult{digest.bytes(), digest.digest()};
}

}  // namespace wsync::bus
