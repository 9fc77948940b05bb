#include "channel/tcp/tcp_admission.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// Refused connections logged per transfer; the rest are counted in one line at the end.
constexpr int kLoggedRefusals = 5;

bool sameToken(const AdmissionToken& presented, std::span<const std::uint8_t> expected) {
  // Compared in constant time: how long a refusal takes says nothing of how much of a guess was right.
  std::uint8_t difference = 0;
  for (std::size_t index = 0; index < presented.size(); ++index) {
    difference = static_cast<std::uint8_t>(difference | (presented[index] ^ expected[index]));
  }
  return difference == 0;
}

// A receiver by the agent id its hello gave, its index and its address; by index and address when it gave none.
std::string receiverLabel(std::uint32_t index, const std::string& agentId, const std::string& address) {
  if (agentId.empty()) return "receiver " + std::to_string(index) + " (" + address + ")";
  return "receiver '" + agentId + "' (index " + std::to_string(index) + ", " + address + ")";
}

}  // namespace

ReceiverAdmission::ReceiverAdmission(std::uint64_t transfer, std::span<const std::uint8_t> token, std::uint32_t source,
                                     ExpectedPayloads payloads, TcpListener& listener, std::string senderAgentId)
    : transfer_(transfer),
      token_(token),
      source_(source),
      payloads_(std::move(payloads)),
      listener_(listener),
      senderAgentId_(std::move(senderAgentId)),
      labels_(payloads_.size()),
      expected_(static_cast<std::uint32_t>(std::count_if(payloads_.begin(), payloads_.end(),
                                                         [](const auto& payload) { return payload.has_value(); }))) {}

ReceiverAdmission::~ReceiverAdmission() {
  // However the send ends, the port refuses connections again.
  listener_.stopListening();
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

tl::expected<void, ChannelFailure> ReceiverAdmission::start() {
  if (complete()) return {};
  return listener_.startListening();
}

std::vector<std::uint32_t> ReceiverAdmission::missing() const {
  std::vector<std::uint32_t> indexes;
  for (std::uint32_t index = 0; index < labels_.size(); ++index) {
    if (payloads_[index] && labels_[index].empty()) indexes.push_back(index);
  }
  return indexes;
}

void ReceiverAdmission::addPollEntries(std::vector<pollfd>& fds) {
  const auto now = Clock::now();
  late_ += std::erase_if(pending_, [&](const Pending& connection) { return now >= connection.deadline; });
  polledListener_ = listener_.listening();
  if (polledListener_) fds.push_back(pollfd{listener_.fd(), POLLIN, 0});
  for (const Pending& connection : pending_) fds.push_back(pollfd{connection.socket.fd(), POLLIN, 0});
}

tl::expected<void, ChannelFailure> ReceiverAdmission::handle(std::span<const pollfd> polled,
                                                             std::vector<AdmittedReceiver>& admitted) {
  std::size_t at = polledListener_ ? 1 : 0;
  // pending_ is as addPollEntries polled it: only what follows changes it.
  for (Pending& connection : pending_) {
    if (polled[at++].revents != 0) readHello(connection, admitted);
  }
  std::erase_if(pending_, [](const Pending& connection) { return !connection.socket.valid(); });
  if (polledListener_ && (polled[0].revents & POLLIN) != 0 && !complete()) {
    if (auto accepted = acceptAll(); !accepted) return accepted;
  }
  if (complete()) close();
  return {};
}

tl::expected<void, ChannelFailure> ReceiverAdmission::acceptAll() {
  for (std::size_t accepted = 0; accepted < kMaxTcpPendingHandshakes; ++accepted) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      // A signal, or a connection that failed before it was accepted (accept(2) says to retry on these).
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == EPERM || meansPeerGone(errno) ||
          errno == ENETDOWN || errno == EHOSTDOWN || errno == ENONET || errno == ENOPROTOOPT || errno == EOPNOTSUPP) {
        continue;
      }
      // Out of descriptors: those the pending strangers hold are this admission's to take back.
      if ((errno == EMFILE || errno == ENFILE) && !pending_.empty()) {
        pending_.pop_front();
        ++displaced_;
        continue;
      }
      // Out of memory, or a broken listener: it stays readable, and the transfer cannot go on.
      return fail(ChannelError::SystemError, "accepting a receiver's connection: " + systemText(errno));
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

void ReceiverAdmission::close() {
  listener_.stopListening();
  // Not one of this transfer's receivers, which are all in: a stranger, or a receiver of a later transfer (which
  // connects again after its refusal).
  pending_.clear();
}

void ReceiverAdmission::refuse(Pending& connection, Admission admission, Refusal refusal, const std::string& why) {
  if (admission == Admission::Refused) {
    if (++refusals_ <= kLoggedRefusals) {
      log::warn("tcp transfer {}: refused a connection from {}: {}", transfer_, connection.socket.peerName(), why);
    }
  } else {
    log::debug("tcp transfer {}: {} connected early: {}", transfer_, connection.socket.peerName(), why);
  }
  const auto answer = encode(SenderAnswer{admission, refusal, senderAgentId_});
  // A fresh connection's send buffer is empty: these bytes go at once or the peer is gone, which is its business.
  (void)::send(connection.socket.fd(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  connection.socket.close();
}

void ReceiverAdmission::readHello(Pending& connection, std::vector<AdmittedReceiver>& admitted) {
  const std::size_t before = connection.helloRead;
  const ssize_t got = ::recv(connection.socket.fd(), connection.hello.data() + connection.helloRead,
                             connection.hello.size() - connection.helloRead, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (got <= 0) {
    connection.socket.close();  // gone before it said hello: it was not a receiver of this transfer yet
    return;
  }
  connection.helloRead += static_cast<std::size_t>(got);
  if (before < kHelloPrefixBytes && connection.helloRead >= kHelloPrefixBytes) {
    // Known from the first 12 bytes: a stranger, or a receiver of another wire version, is not waited for.
    const auto version = helloWireVersion(std::span(connection.hello).first<kHelloPrefixBytes>());
    if (!version) {
      if (++refusals_ <= kLoggedRefusals) {
        log::warn("tcp transfer {}: dropped a connection from {}: not a wsync tcp receiver", transfer_,
                  connection.socket.peerName());
      }
      connection.socket.close();
      return;
    }
    if (*version != kWireVersion) {
      const std::string why =
          "it speaks wire version " + std::to_string(*version) + ", this sender " + std::to_string(kWireVersion);
      refuse(connection, Admission::Refused, Refusal::WireVersion, why);
      return;
    }
  }
  if (connection.helloRead < connection.hello.size()) return;

  const auto hello = decodeHello(connection.hello);
  if (!hello) {
    refuse(connection, Admission::Refused, Refusal::AgentId, "its agent id's length is out of range");
    return;
  }
  if (hello->transfer > transfer_) {
    refuse(connection, Admission::Later, Refusal::None,
           "it asks for transfer " + std::to_string(hello->transfer) + ", this is " + std::to_string(transfer_));
    return;
  }
  if (hello->transfer < transfer_) {
    refuse(connection, Admission::Refused, Refusal::Stale,
           "it asks for transfer " + std::to_string(hello->transfer) + ", this is " + std::to_string(transfer_));
    return;
  }
  if (!sameToken(hello->token, token_)) {
    refuse(connection, Admission::Refused, Refusal::Token, "its token is not this round's");
    return;
  }
  if (!hello->agentId.empty()) {
    if (auto problem = checkAgentId(hello->agentId); !problem.empty()) {
      refuse(connection, Admission::Refused, Refusal::AgentId, "its agent id: " + problem);
      return;
    }
  }
  std::string label = receiverLabel(hello->receiver, hello->agentId, connection.socket.peerName());
  if (hello->source != source_) {
    refuse(connection, Admission::Refused, Refusal::Source,
           label + " asks for source " + std::to_string(hello->source) + ", this is source " + std::to_string(source_));
    return;
  }
  if (hello->receiver < payloads_.size() && !payloads_[hello->receiver]) {
    refuse(connection, Admission::Refused, Refusal::Source,
           label + " takes nothing from source " + std::to_string(source_) + " in this transfer");
    return;
  }
  if (hello->receiver >= labels_.size() || !labels_[hello->receiver].empty()) {
    refuse(connection, Admission::Refused, Refusal::Receiver,
           label + ": index " + std::to_string(hello->receiver) + " of " + std::to_string(labels_.size()) +
               (hello->receiver < labels_.size() ? " is taken by " + labels_[hello->receiver] : " is out of range"));
    return;
  }
  if (const std::uint64_t payload = *payloads_[hello->receiver]; hello->payloadBytes != payload) {
    refuse(connection, Admission::Refused, Refusal::PayloadBytes,
           label + " expects " + std::to_string(hello->payloadBytes) + " bytes, this transfer moves it " +
               std::to_string(payload));
    return;
  }
  labels_[hello->receiver] = label;
  ++admitted_;
  log::debug("tcp transfer {}: {} connected", transfer_, label);
  admitted.push_back(AdmittedReceiver{hello->receiver, std::move(connection.socket), std::move(label)});
}

}  // namespace wsync::bus::tcp
