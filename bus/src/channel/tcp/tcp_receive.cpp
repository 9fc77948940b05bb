// The tcp channel's receiver (docs/tcp-channel.md): connects to the sender, presents the round's token and its
// index, and reads the payload straight into its tensors. In a region round it connects to every source that has
// a segment for it, one after another, and then reads from all of them at once, each connection at its own pace.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "channel/tcp/payload_stream.hpp"
#include "channel/tcp/region_digests.hpp"
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

// One connection being read: its stream, how far it is, and its digest (one over the whole stream in a round of
// one sender, one per delivery in a region round).
struct tcp::Incoming {
  Socket socket;
  std::string peer;  // how errors name the sender
  const tcp::PayloadStream* stream = nullptr;
  tcp::StreamCursor cursor;
  tcp::StreamCursor digested;
  std::optional<StreamDigest> whole;
  tcp::DeliveryDigests deliveries;
  std::size_t bucketsReported = 0;
  bool done = false;
};

tl::expected<TransferResult, ChannelFailure> TcpChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver,
                                                                 std::chrono::steady_clock::time_point deadline) {
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  auto received = receiveFromSender(transfer, plan, tensors, receiver, watch);
  if (!received) return tl::unexpected(waitAfterSenderGone(std::move(received.error()), watch));
  return received;
}

tl::expected<RegionTransferResult, ChannelFailure> TcpChannel::receiveRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) {
  tcp::TransferWatch watch(transfer, deadline, cancelProbe_);
  auto received = receiveFromSources(transfer, plan, receiver, locals, watch);
  if (!received) return tl::unexpected(waitAfterSenderGone(std::move(received.error()), watch));
  return received;
}

ChannelFailure TcpChannel::waitAfterSenderGone(ChannelFailure failure, tcp::TransferWatch& watch) const {
  if (failure.code != ChannelError::PeerGone) return failure;
  // The sender closed the connection: it died, or its channel went (a sender that failed keeps its receivers'
  // connections open until then, see send()). Either way the coordinator ends the round, and a report of this
  // side's could reach it first and be blamed: wait for the round's end, and report the sender gone only without it.
  auto waited = watch.sleep(config_.senderGoneGrace, "waiting for the round to end after the tcp sender went");
  if (!waited && waited.error().code == ChannelError::Aborted) {
    return ChannelFailure{ChannelError::Aborted, failure.detail + "; the round ended meanwhile"};
  }
  return failure;
}

std::string TcpChannel::selfName(std::uint32_t receiver) const {
  return config_.agentId.empty() ? "receiver " + std::to_string(receiver)
                                 : "receiver '" + config_.agentId + "' (index " + std::to_string(receiver) + ")";
}

tl::expected<TransferResult, ChannelFailure> TcpChannel::receiveFromSender(
    std::uint64_t transfer, const BucketPlan& plan, std::span<const std::span<std::byte>> tensors,
    std::uint32_t receiver, tcp::TransferWatch& watch) {
  auto stream = tcp::PayloadStream::forReceiving(plan, tensors);
  if (!stream) return tl::unexpected(stream.error());
  if (senders_.empty() || !config_.sourceContacts.empty()) {
    return fail(ChannelError::Unsupported, "this end of the tcp channel knows no sender: it cannot receive");
  }
  std::vector<tcp::Incoming> incoming(1);
  incoming[0].stream = &*stream;
  incoming[0].whole.emplace();
  if (auto admitted = connect(transfer, receiver, 0, stream->totalBytes(), watch, incoming[0]); !admitted) {
    return tl::unexpected(admitted.error());
  }
  if (auto read = readAll(incoming, watch); !read) return tl::unexpected(read.error());
  return TransferResult{incoming[0].whole->bytes(), incoming[0].whole->digest()};
}

tl::expected<RegionTransferResult, ChannelFailure> TcpChannel::receiveFromSources(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, tcp::TransferWatch& watch) {
  if (receiver >= plan.receiverCount()) {
    return fail(ChannelError::PlanMismatch,
                "receiver " + std::to_string(receiver) + " of a plan of " + std::to_string(plan.receiverCount()));
  }
  // Every stream built, and so checked against the local tensors, before any connection.
  std::vector<std::uint32_t> sources;
  std::vector<tcp::PayloadStream> streams;
  for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
    if (plan.deliveries(source, receiver).empty()) continue;  // nothing from it: it is not reached
    if (config_.sourceContacts.empty() || source >= senders_.size()) {
      return fail(ChannelError::PlanMismatch, selfName(receiver) + " takes segments from source " +
                                                  std::to_string(source) + ", whose contact the plan lacks (" +
                                                  std::to_string(senders_.size()) + " named)");
    }
    auto stream = tcp::PayloadStream::forRegionReceiver(plan, source, receiver, locals);
    if (!stream) return tl::unexpected(stream.error());
    sources.push_back(source);
    streams.push_back(std::move(*stream));
  }
  std::vector<tcp::Incoming> incoming(sources.size());
  for (std::size_t at = 0; at < sources.size(); ++at) {
    incoming[at].stream = &streams[at];
    if (auto admitted = connect(transfer, receiver, sources[at], streams[at].totalBytes(), watch, incoming[at]);
        !admitted) {
      return tl::unexpected(admitted.error());
    }
  }
  if (auto read = readAll(incoming, watch); !read) return tl::unexpected(read.error());
  RegionTransferResult result(plan.sourceCount(), PairDigest().result());
  for (std::size_t at = 0; at < sources.size(); ++at) result[sources[at]] = incoming[at].deliveries.result();
  return result;
}

tl::expected<void, ChannelFailure> TcpChannel::connect(std::uint64_t transfer, std::uint32_t receiver,
                                                       std::uint32_t source, std::uint64_t payloadBytes,
                                                       tcp::TransferWatch& watch, tcp::Incoming& into) {
  const SenderTarget& target = senders_[source];
  // How errors name the sender: by its address until its answer gives its agent id.
  into.peer = target.name + " at " + target.contact;
  const std::string self = selfName(receiver);

  tcp::ReceiverHello hello;
  hello.receiver = receiver;
  hello.transfer = transfer;
  hello.payloadBytes = payloadBytes;
  hello.source = source;
  hello.agentId = config_.agentId;
  std::copy(config_.token.begin(), config_.token.end(), hello.token.begin());
  const auto helloBytes = tcp::encode(hello);

  // Connect, say hello, and be admitted: again while the sender refuses connections, closes them before answering,
  // or answers Later.
  Socket& socket = into.socket;
  std::string lastRefusal = "none yet";
  const std::string connecting = "connecting to " + target.name + " at " + target.contact;
  auto interval = kFirstReconnectInterval;
  auto again = [&](std::string why) -> tl::expected<void, ChannelFailure> {
    socket.close();
    lastRefusal = std::move(why);
    auto waited = watch.sleep(interval, connecting + " (last attempt: " + lastRefusal + ")");
    interval = std::min(interval * 2, kReconnectInterval);
    return waited;
  };
  while (true) {
    for (const SenderAddress& address : target.addresses) {
      Socket attempt(::socket(address.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!attempt.valid()) {
        return fail(ChannelError::SystemError, "a socket for " + target.name + ": " + tcp::systemText(errno));
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
    auto answered = sendAll(socket, helloBytes, watch, into.peer, "saying hello").and_then([&] {
      return receiveAll(socket, answerBytes, watch, into.peer, "waiting to be admitted");
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
      return fail(ChannelError::SystemError, "the peer at " + target.contact + " is not a wsync tcp sender");
    }
    if (!answer->agentId.empty()) into.peer = target.name + " '" + answer->agentId + "' at " + target.contact;
    if (answer->admission == tcp::Admission::Admitted) return {};
    if (answer->admission == tcp::Admission::Refused) {
      return fail(ChannelError::Refused, into.peer + " refused " + self + " of transfer " + std::to_string(transfer) +
                                             ": " + tcp::describe(answer->refusal));
    }
    // Later: the sender is finishing an earlier transfer.
    if (auto waited = again("the sender was on an earlier transfer"); !waited) return tl::unexpected(waited.error());
  }
}

tl::expected<void, ChannelFailure> TcpChannel::readAll(std::span<tcp::Incoming> incoming, tcp::TransferWatch& watch) {
  // Each payload straight into the tensors, digested right behind the reads while the bytes are in cache. Every
  // connection is read as far as it has bytes, in turn; a poll waits only when none had any.
  std::array<iovec, tcp::kMaxIovecs> iovecs{};
  std::vector<pollfd> fds;
  std::vector<tcp::Incoming*> polled;
  std::uint64_t reported = 0;  // progress: the bucket ends reported, over every connection
  std::size_t left = incoming.size();
  for (tcp::Incoming& connection : incoming) {
    if (connection.stream->totalBytes() == 0) {
      // Nothing to read: acknowledged at once.
      if (auto acked = acknowledge(connection, watch); !acked) return acked;
      --left;
    }
  }
  while (left > 0) {
    bool progressed = false;
    fds.clear();
    polled.clear();
    for (tcp::Incoming& connection : incoming) {
      if (connection.done) continue;
      const tcp::PayloadStream& stream = *connection.stream;
      const std::size_t count = stream.gather(connection.cursor, kTcpChunkBytes, iovecs);
      const ssize_t got = ::readv(connection.socket.fd(), iovecs.data(), static_cast<int>(count));
      if (got > 0) {
        progressed = true;
        stream.advance(connection.cursor, static_cast<std::uint64_t>(got));
        if (connection.whole) {
          stream.digestUpTo(connection.digested, connection.cursor.position, *connection.whole);
        } else {
          connection.deliveries.upTo(stream, connection.cursor.position);
        }
        const auto& bucketEnds = stream.bucketEnds();
        const std::size_t before = connection.bucketsReported;
        while (connection.bucketsReported < bucketEnds.size() &&
               bucketEnds[connection.bucketsReported] <= connection.cursor.position) {
          ++connection.bucketsReported;
        }
        if (connection.bucketsReported > before) {
          reported += bucketEnds[connection.bucketsReported - 1] - (before == 0 ? 0 : bucketEnds[before - 1]);
          reportProgress(reported);
        }
        if (connection.cursor.position == stream.totalBytes()) {
          if (auto acked = acknowledge(connection, watch); !acked) return acked;
          --left;
        }
        continue;
      }
      if (got == 0) {
        return fail(ChannelError::PeerGone, connection.peer + " closed the connection after " +
                                                std::to_string(connection.cursor.position) + " of " +
                                                std::to_string(stream.totalBytes()) + " bytes");
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        const ChannelError code = tcp::meansPeerGone(errno) ? ChannelError::PeerGone : ChannelError::SystemError;
        return fail(code, connection.peer + " after " + std::to_string(connection.cursor.position) + " of " +
                              std::to_string(stream.totalBytes()) + " bytes: " + tcp::systemText(errno));
      }
      fds.push_back(pollfd{connection.socket.fd(), POLLIN, 0});
      polled.push_back(&connection);
    }
    if (left == 0) break;
    if (progressed) {
      if (auto ok = watch.check(readingWhat(incoming)); !ok) return tl::unexpected(ok.error());
      continue;
    }
    if (auto waited = watch.poll(fds, readingWhat(incoming)); !waited) return tl::unexpected(waited.error());
  }
  return {};
}

tl::expected<void, ChannelFailure> TcpChannel::acknowledge(tcp::Incoming& connection, tcp::TransferWatch& watch) {
  if (connection.whole) {
    connection.stream->digestUpTo(connection.digested, connection.cursor.position, *connection.whole);
  } else {
    connection.deliveries.upTo(*connection.stream, connection.cursor.position);
  }
  auto acked = sendAll(connection.socket, tcp::encodeAck(connection.cursor.position), watch, connection.peer,
                       "acknowledging the payload");
  connection.done = true;
  return acked;
}

std::string TcpChannel::readingWhat(std::span<const tcp::Incoming> incoming) {
  std::string what = "receiving from ";
  std::size_t named = 0;
  for (const tcp::Incoming& connection : incoming) {
    if (connection.done) continue;
    what += (named++ == 0 ? "" : ", ") + connection.peer;
  }
  return what;
}

}  // namespace wsync::bus
