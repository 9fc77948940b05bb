// The tcp channel's receiver (docs/tcp-channel.md): connects to the sender, presents the round's token and its
// index, and reads the payload straight into its tensors.
#include <sys/socket.h>
#include <sys/uio.h>

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

// A sender that refuses connections (its agent not listening yet, or restarting) or is still on an earlier transfer
// is asked again after this long: a connection attempt costs one round trip, and the transfer starts soon after the
// sender is ready.
constexpr std::chrono::milliseconds kReconnectInterval{10};

// Writes all of `bytes`, waiting in slices while the socket's buffer is full.
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
      return fail(code, "the tcp sender at " + peer + " while " + what + ": " + tcp::systemText(errno));
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
      return fail(ChannelError::PeerGone, "the tcp sender at " + peer + " closed the connection while " + what);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
      return fail(code, "the tcp sender at " + peer + " while " + what + ": " + tcp::systemText(errno));
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
  const std::string& peer = config_.senderContact;

  tcp::ReceiverHello hello;
  hello.receiver = receiver;
  hello.transfer = transfer;
  hello.payloadBytes = stream->totalBytes();
  std::copy(config_.token.begin(), config_.token.end(), hello.token.begin());
  const auto helloBytes = tcp::encode(hello);

  // Connect, say hello, and be admitted: again while the sender refuses connections or answers Later.
  Socket socket;
  std::string lastRefusal = "none yet";
  const std::string connecting = "connecting to the tcp sender at " + peer;
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
      if (auto waited = watch.sleep(kReconnectInterval, connecting + " (last attempt: " + lastRefusal + ")");
          !waited) {
        return tl::unexpected(waited.error());
      }
      continue;
    }
    socket.sendSmallFramesAtOnce();
    if (auto sent = sendAll(socket, helloBytes, watch, peer, "saying hello"); !sent) {
      return tl::unexpected(sent.error());
    }
    std::array<std::byte, tcp::kAnswerBytes> answerBytes{};
    if (auto got = receiveAll(socket, answerBytes, watch, peer, "waiting to be admitted"); !got) {
      return tl::unexpected(got.error());
    }
    const auto answer = tcp::decodeAnswer(answerBytes);
    if (!answer) return fail(ChannelError::SystemError, "the peer at " + peer + " is not a wsync tcp sender");
    if (answer->admission == tcp::Admission::Admitted) break;
    if (answer->admission == tcp::Admission::Refused) {
      return fail(ChannelError::Refused, "the tcp sender at " + peer + " refused receiver " +
                                             std::to_string(receiver) + " of transfer " + std::to_string(transfer) +
                                             ": " + tcp::describe(answer->refusal));
    }
    socket.close();  // Later: the sender is finishing an earlier transfer
    lastRefusal = "the sender was on an earlier transfer";
    if (auto waited = watch.sleep(kReconnectInterval, connecting); !waited) return tl::unexpected(waited.error());
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
      if (auto ok = watch.check("receiving from the tcp sender at " + peer); !ok) return tl::unexpected(ok.error());
      continue;
    }
    if (got == 0) {
      return fail(ChannelError::PeerGone, "the tcp sender at " + peer + " closed the connection after " +
                                              std::to_string(cursor.position) + " of " +
                                              std::to_string(stream->totalBytes()) + " bytes");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
      return fail(code, "the tcp sender at " + peer + " after " + std::to_string(cursor.position) + " of " +
                            std::to_string(stream->totalBytes()) + " bytes: " + tcp::systemText(errno));
    }
    pollfd fd{socket.fd(), POLLIN, 0};
    auto waited = watch.poll(std::span(&fd, 1), "receiving from the tcp sender at " + peer);
    if (!waited) return tl::unexpected(waited.error());
  }
  if (auto acked = sendAll(socket, tcp::encodeAck(cursor.position), watch, peer, "acknowledging the payload"); !acked) {
    return tl::unexpected(acked.error());
  }
  return TransferResult{digest.bytes(), digest.digest()};
}

}  // namespace wsync::bus
