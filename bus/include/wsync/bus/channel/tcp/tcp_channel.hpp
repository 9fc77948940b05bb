#pragma once
// The tcp channel (docs/tcp-channel.md): host memory to receivers on any host, over plain TCP sockets (never
// ZeroMQ). The sender listens (tcp_listener.hpp); for each transfer every receiver connects, presents the round's
// token and its receiver index, and reads the tensors' bytes in manifest order straight into its tensors, while the
// sender writes them from its own tensors to every receiver it admitted, each connection at its own pace
// (non-blocking sockets and poll). Neither side holds a bucket buffer; the bucket plan decides only where progress
// is reported. Both sides stream XXH3-128 over the bytes as the shm channel does, so their digests are the shm
// channel's for the same tensors. The coordinator's side is TcpChannelOwner (tcp_channel_owner.hpp).
//
// Region rounds (docs/regions.md): every source listens as a sender does; each receiver connects to every source that
// has a segment for it (the plan's source contacts), presenting the source index it means, and reads the segments it
// takes from each, from all of them at once; each source streams each of its receivers its own deliveries.
//
// Connections last one transfer: a receiver connects when its transfer starts and closes after its last byte and
// ack, so nothing carries from one round to the next but the sender's listener, which listens only while a send
// admits its receivers (each connection's hello within kTcpHelloDeadline, all of them polled at once).
//
// Threading: one thread per side per transfer (the agent's I/O thread).
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/tcp/tcp_listener.hpp"

namespace wsync::bus {

namespace tcp {
class Socket;
class TransferWatch;
struct Incoming;
}  // namespace tcp

// The round's admission token (ChannelGrant::groupId): 128 random bits, which no stranger guesses in a round's life.
inline constexpr std::size_t kTcpTokenBytes = 16;
// Receivers one sender takes in one round: as many as the shm arena takes. Every worker with host bindings offers
// both host channels, and the coordinator admits no more such workers than the smaller limit (registration.cpp).
inline constexpr std::uint32_t kMaxTcpReceivers = 64;
// The most one sendmsg or readv moves: large enough that a call's cost (a microsecond) is small against its copy
// (about 100 us at 10 GB/s), small enough that the digest that follows finds the bytes still in L2, and that one
// fast receiver's turn holds the others for a fraction of a millisecond.
inline constexpr std::uint64_t kTcpChunkBytes = std::uint64_t{1} << 20;
// A connection the sender accepted that has not presented a whole hello by then is dropped. A receiver sends its
// hello the moment its connect completes, so the hello follows the handshake's last packet at once; this leaves room
// for one retransmission of a lost hello (200 ms at least) on a long link, and a receiver dropped anyway connects
// again. What it bounds: how long a stranger's silent or trickling connection holds one of the sender's descriptors.
inline constexpr std::chrono::milliseconds kTcpHelloDeadline{500};
// Connections that wait for their hello at once, at most: all are polled together, so none delays another or a
// receiver; past this the oldest is dropped, which could take a real receiver's place only if this many connections
// arrived between its connect and its hello (microseconds apart), and it would connect again. Bounds the descriptors
// a flood of strangers holds.
inline constexpr std::size_t kMaxTcpPendingHandshakes = 512;
// A receiver whose sender's connection closed waits this long for the round to end before it reports the sender
// gone: the sender died, and the coordinator sees that within its heartbeat timeout (2 s by default), or it failed
// and reported why. Either report says more than this receiver's, and one that raced them would be blamed.
inline constexpr std::chrono::milliseconds kTcpSenderGoneGrace{5'000};

struct TcpChannelConfig {
  std::shared_ptr<TcpListener> listener;                            // the sender's; null on a receiver
  std::string senderContact;                                        // where the receivers connect: HOST:PORT
  std::vector<std::uint8_t> token;                                  // the round's, kTcpTokenBytes
  std::chrono::milliseconds senderGoneGrace = kTcpSenderGoneGrace;  // a receiver's (tests shorten it)
  // This end's agent (empty: unnamed): a receiver presents it in its hello and the sender in its answer, so that
  // each side's faults name the other by agent id.
  std::string agentId{};
  // A region round's receiver: where each source listens, in source order (senderContact is then empty).
  std::vector<std::string> sourceContacts{};
};

class TcpChannel final : public Channel {
 public:
  // A receiver's end resolves the sender's contact (every source's) here: a name that does not resolve fails now,
  // not mid-round.
  static tl::expected<std::unique_ptr<TcpChannel>, ChannelFailure> open(TcpChannelConfig config);
  ~TcpChannel() override;

  msg::ChannelKind kind() const override { return msg::ChannelKind::Tcp; }
  TensorMemory tensorMemory() const override { return TensorMemory::Host; }
  const std::string& key() const override { return key_; }
  void setCancelProbe(std::function<bool()> probe) override { cancelProbe_ = std::move(probe); }

  // Listens, admits receivers 0..receiverCount-1 (each once, with the round's token), stops listening, and streams
  // the tensors to each; returns once every one of them acknowledged the last byte. A receiver that closes or resets
  // its connection fails the transfer with PeerGone at once, naming it by the agent id its hello gave; the other
  // receivers' connections are then kept open until this channel goes, so that they end with the round rather than
  // fail on their own.
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::uint32_t receiverCount,
                                                    std::chrono::steady_clock::time_point deadline) override;
  // Connects to the sender (again, while it refuses connections, closes them unanswered or is still on an earlier
  // transfer, until the deadline), presents the token, `receiver` and its agent id, and reads every byte into
  // `tensors`. A sender that closes the connection after admitting it fails it with PeerGone, after waiting up to
  // senderGoneGrace for the round to end (Aborted).
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline) override;

  // Region rounds: as send() and receive(), a source admitting only the receivers it has segments for.
  bool carriesRegions() const override { return true; }
  tl::expected<RegionTransferResult, ChannelFailure> sendRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) override;
  tl::expected<RegionTransferResult, ChannelFailure> receiveRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) override;

 private:
  struct SenderAddress {
    sockaddr_storage address;
    socklen_t length;
  };
  // A sender as a receiver reaches it: its contact resolved, and how errors name it.
  struct SenderTarget {
    std::string contact;
    std::string name;  // "the tcp sender", "tcp source 2"
    std::vector<SenderAddress> addresses;
  };

  TcpChannel(TcpChannelConfig config, std::vector<SenderTarget> senders);
  static tl::expected<std::vector<SenderAddress>, ChannelFailure> resolveSender(const std::string& senderContact);
  // receive() and receiveRegions() but for the wait after a lost sender.
  tl::expected<TransferResult, ChannelFailure> receiveFromSender(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver, tcp::TransferWatch& watch);
  tl::expected<RegionTransferResult, ChannelFailure> receiveFromSources(std::uint64_t transfer, const RegionPlan& plan,
                                                                        std::uint32_t receiver,
                                                                        std::span<const std::span<std::byte>> locals,
                                                                        tcp::TransferWatch& watch);
  // A sender closed its connection (PeerGone): waits up to senderGoneGrace for the round to end (see receive()).
  ChannelFailure waitAfterSenderGone(ChannelFailure failure, tcp::TransferWatch& watch) const;
  // Connects to senders_[source] and is admitted as `receiver` expecting `payloadBytes`, into `into`.
  tl::expected<void, ChannelFailure> connect(std::uint64_t transfer, std::uint32_t receiver, std::uint32_t source,
                                             std::uint64_t payloadBytes, tcp::TransferWatch& watch,
                                             tcp::Incoming& into);
  // Reads every admitted connection's payload to its end and acknowledges each.
  tl::expected<void, ChannelFailure> readAll(std::span<tcp::Incoming> incoming, tcp::TransferWatch& watch);
  tl::expected<void, ChannelFailure> acknowledge(tcp::Incoming& connection, tcp::TransferWatch& watch);
  // What a receiver waits for, for a timeout's detail: the senders still sending.
  static std::string readingWhat(std::span<const tcp::Incoming> incoming);
  std::string selfName(std::uint32_t receiver) const;

  TcpChannelConfig config_;
  std::vector<SenderTarget> senders_;  // the contacts resolved (a receiver's end): the sender, or every source
  std::string key_;
  std::function<bool()> cancelProbe_;
  std::vector<tcp::Socket> parked_;  // a failed transfer's receivers, until this channel goes (see send)
};

// A tcp channel's key(): its sender's contact and the round's token, so that every round opens its own.
std::string tcpChannelKey(std::string_view senderContact, std::span<const std::uint8_t> token);
// A region round's: every source's contact, in source order, and the round's token.
std::string tcpChannelKey(std::span<const std::string> sourceContacts, std::span<const std::uint8_t> token);

}  // namespace wsync::bus
