// The tcp channel's receiver (docs/tcp-channel.md): connects to the sender, presents the round's token and its
// index, and reads the payload straight into its tensors.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string>

#include "channel/tcp/payload_stream.hpp"
#include "channel/tcp/tcp_socket.hpp"
#include "channel/tcp/tcp_wire.hpp"
#include "channel/tcp/transfer_watch.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"

namespace wsync::bus {
namespace {

using tcp::Socket;

// A sender that refuses connections (it listens only while its send admits receivers, and the coordinator sends the
// receivers' plans before the sender's), closes one before answering (it stopped listening, or the hello came late)
// or is still on an earlier transfer is asked again: first after kFirstReconnectInterval, then after twice as long
// each time, up to kReconnectInterval. A connection attempt costs one round trip; a sender starts listening about a
// millisecond after its receivers got their plans, so the first tries are the ones that usually meet it, and a long
// wait (a sender still on its previous round) costs at most a hundred attempts a second.
constexpr std::chrono::milliseconds kFirstReconnectInterval{1};
constexpr std::chrono::milliseconds kReconnectInterval{10};

// Writes all of `bytes`, waiting in slices while the socket's buffer is full. `peer` names the sender.
tl::expected<void, ChannelFailure> sendAll(const Socket& socket, std::span<const std::byte> bytes,
                                           tcp::TransferWatch& watch, const std::string& peer, const char* what) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(socket.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(sent));
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
      return fail(code, peer + " while " + what + ": " + tcp::systemText(errno));
    }
    pollfd fd{socket.fd(), POLLOUT, 0};
    if (auto waited = watch.poll(std::span(&fd, 1), what); !waited) return tl::unexpected(waited.error());
  }
  return {};
}

// Reads exactly `bytes.size()` bytes; a connection closed first is PeerGone, `what` saying when.
tl::expected<void, ChannelFailure> receiveAll(const Socket& socket, std::span<std::byte> bytes,
                                              tcp::TransferWatch& watch, const std::string& peer, const char* what) {
  while (!bytes.empty()) {
    const ssize_t got = ::recv(socket.fd(), bytes.data(), bytes.size(), MSG_DONTWAIT);
    if (got > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(got));
      continue;
    }
    if (got == 0) {
      return fail(ChannelError::PeerGone, peer + " closed the connection while " + what);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
      return fail(code, peer + " while " + what + ": " + tcp::systemText(errno));
    }
    pollfd fd{socket.fd(), POLLIN, 0};
    if (auto waited = watch.poll(std::span(&fd, 1), what); !waited) return tl::unexpected(waited.error());
  }
  return {};
}

}  // namespace

tl::expected<TransferResult, ChannelFailure> TcpChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver,
                                                                 std::chrono::steady_clock::time_point deadline) {
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  auto received = receiveFromSender(transfer, plan, tensors, receiver, watch);
  if (received || received.error().code != ChannelError::PeerGone) return received;
  // The sender closed the connection: it died, or its channel went (a sender that failed keeps its receivers'
  // connections open until then, see send()). Either way the coordinator ends the round, and a report of this
  // side's could reach it first and be blamed: wait for the round's end, and report the sender gone only without it.
  auto waited = watch.sleep(config_.senderGoneGrace, "waiting for the round to end after the tcp sender went");
  if (!waited && waited.error().code == ChannelError::Aborted) {
    return fail(ChannelError::Aborted, received.error().detail + "; the round ended meanwhile");
  }
  return received;
}

tl::expected<TransferResult, ChannelFailure> TcpChannel::receiveFromSender(
    std::uint64_t transfer, const BucketPlan& plan, std::span<const std::span<std::byte>> tensors,
    std::uint32_t receiver, tcp::TransferWatch& watch) {
  auto stream = tcp::PayloadStream::forReceiving(plan, tensors);
  if (!stream) return tl::unexpected(stream.error());
  if (senderAddresses_.empty()) {
    return fail(ChannelError::Unsupported, "this end of the tcp channel knows no sender: it cannot receive");
  }
  // How errors name the sender: by its address until its answer gives its agent id.
  std::string peer = "the tcp sender at " + config_.senderContact;
  const std::string self = config_.agentId.empty()
                               ? "receiver " + std::to_string(receiver)
                               : "receiver '" + config_.agentId + "' (index " + std::to_string(receiver) + ")";

  tcp::ReceiverHello hello;
  hello.receiver = receiver;
  hello.transfer = transfer;
  hello.payloadBytes = stream->totalBytes();
  hello.agentId = config_.agentId;
  std::copy(config_.token.begin(), config_.token.end(), hello.token.begin());
  const auto helloBytes = tcp::encode(hello);

  // Connect, say hello, and be admitted: again while the sender refuses connections, closes them before answering,
  // or answers Later.
  Socket socket;
  std::string lastRefusal = "none yet";
  const std::string connecting = "connecting to the tcp sender at " + config_.senderContact;
  auto interval = kFirstReconnectInterval;
  auto again = [&](std::string why) -> tl::expected<void, ChannelFailure> {
    socket.close();
    lastRefusal = std::move(why);
    auto waited = watch.sleep(interval, connecting + " (last attempt: " + lastRefusal + ")");
    interval = std::min(interval * 2, kReconnectInterval);
    return waited;
  };
  while (true) {
    for (const SenderAddress& address : senderAddresses_) {
      Socket attempt(::socket(address.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!attempt.valid()) {
        return fail(ChannelError::SystemError, "a socket for the tcp sender: " + tcp::systemText(errno));
      }
      if (::connect(attempt.fd(), reinterpret_cast<const sockaddr*>(&address.address), address.length) != 0) {
        if (errno != EINPROGRESS) {
          lastRefusal = tcp::systemText(errno);
          continue;
        }
        pollfd fd{attempt.fd(), POLLOUT, 0};
        while (fd.revents == 0) {
          auto waited = watch.poll(std::span(&fd, 1), connecting + " (last attempt: " + lastRefusal + ")");
          if (!waited) return tl::unexpected(waited.error());
        }
        if (const int error = attempt.pendingError(); error != 0) {
          lastRefusal = tcp::systemText(error);
          continue;
        }
      }
      socket = std::move(attempt);
      break;
    }
    if (!socket.valid()) {
      if (auto waited = again(lastRefusal); !waited) return tl::unexpected(waited.error());
      continue;
    }
    socket.sendSmallFramesAtOnce();
    std::array<std::byte, tcp::kAnswerBytes> answerBytes{};
    auto answered = sendAll(socket, helloBytes, watch, peer, "saying hello").and_then([&] {
      return receiveAll(socket, answerBytes, watch, peer, "waiting to be admitted");
    });
    if (!answered) {
      // Closed before an answer: the sender stopped listening (its admission is over, or it was never this
      // transfer's), or dropped a hello it did not get in time. Neither is the sender gone.
      if (answered.error().code != ChannelError::PeerGone) return tl::unexpected(answered.error());
      if (auto waited = again("the sender closed the connection before answering"); !waited) {
        return tl::unexpected(waited.error());
      }
      continue;
    }
    const auto answer = tcp::decodeAnswer(answerBytes);
    if (!answer) {
      return fail(ChannelError::SystemError, "the peer at " + config_.senderContact + " is not a wsync tcp sender");
    }
    if (!answer->agentId.empty()) peer = "the tcp sender '" + answer->agentId + "' at " + config_.senderContact;
    if (answer->admission == tcp::Admission::Admitted) break;
    if (answer->admission == tcp::Admission::Refused) {
      return fail(ChannelError::Refused, peer + " refused " + self + " of transfer " + std::to_string(transfer) + ": " +
                                             tcp::describe(answer->refusal));
    }
    // Later: the sender is finishing an earlier transfer.
    if (auto waited = again("the sender was on an earlier transfer"); !waited) return tl::unexpected(waited.error());
  }

  // The payload, straight into the tensors, digested right behind the reads while the bytes are in cache.
  StreamDigest digest;
  tcp::StreamCursor cursor;
  tcp::StreamCursor digested;
  const auto& bucketEnds = stream->bucketEnds();
  std::size_t bucketsReported = 0;
  std::array<iovec, tcp::kMaxIovecs> iovecs{};
  while (cursor.position < stream->totalBytes()) {
    const std::size_t count = stream->gather(cursor, kTcpChunkBytes, iovecs);
    const ssize_t got = ::readv(socket.fd(), iovecs.data(), static_cast<int>(count));
    if (got > 0) {
      stream->advance(cursor, static_cast<std::uint64_t>(got));
      stream->digestUpTo(digested, cursor.position, digest);
      const std::size_t before = bucketsReported;
      while (bucketsReported < bucketEnds.size() && bucketEnds[bucketsReported] <= cursor.position) ++bucketsReported;
      if (bucketsReported > before) reportProgress(bucketEnds[bucketsReported - 1]);
      if (auto ok = watch.check("receiving from " + peer); !ok) return tl::unexpected(ok.error());
      continue;
    }
    if (got == 0) {
      return fail(ChannelError::PeerGone, peer + " closed the connection after " + std::to_string(cursor.position) +
                                              " of " + std::to_string(stream->totalBytes()) + " bytes");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
      return fail(code, peer + " after " + std::to_string(cursor.position) + " of " +
                            std::to_string(stream->totalBytes()) + " bytes: " + tcp::systemText(errno));
    }
    pollfd fd{socket.fd(), POLLIN, 0};
    auto waited = watch.poll(std::span(&fd, 1), "receiving from " + peer);
    if (!waited) return tl::unexpected(waited.error());
  }
  if (auto acked = sendAll(socket, tcp::encodeAck(cursor.position), watch, peer, "acknowledging the payload"); !acked) {
    return tl::unexpected(acked.error());
  }
  return TransferResult{digest.bytes(), digest.digest()};
}

}  // namespace wsync::bus
