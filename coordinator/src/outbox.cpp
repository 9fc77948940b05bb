#include "outbox.hpp"

#include <algorithm>
#include <chrono>

#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::coordinator {

void Outbox::send(const std::string& peer, std::span<const std::uint8_t> bytes) {
  auto sent = wire_.send(peer, bytes);
  if (sent) return;
  const auto code = sent.error().code;
  if (agents_.contains(peer) &&
      (code == bus::TransportError::PeerUnreachable || code == bus::TransportError::WouldBlock)) {
    // A registered agent that cannot take a command (gone, or its queue full because it does not read) would wait
    // for that command for good: it is dropped, and registers again.
    noteUnreachable(peer, code == bus::TransportError::PeerUnreachable
                              ? "its connection is gone: a message to it could not be delivered"
                              : "it does not read its messages: its queue is full");
    return;
  }
  // A client that is not registered loses its answer: routine when it has gone (its old connection's queued
  // requests are answered after it left), worth a warning when it does not read what it asks for; either way a
  // flood of them is a few lines per interval, not one per message.
  const auto level = code == bus::TransportError::PeerUnreachable ? spdlog::level::debug : spdlog::level::warn;
  logLimiter_.log(level, "send:" + peer, std::chrono::steady_clock::now(),
                  [&] { return "send to " + bus::printableText(peer) + " failed: " + sent.error().describe(); });
}

void Outbox::refuse(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code, const std::string& detail,
                    std::uint64_t committedVersion) {
  auto& fbb = start();
  send(peer, msg::CreateError(fbb, code, fbb.CreateString(detail), inReplyTo, committedVersion));
}

void Outbox::noteUnreachable(const std::string& routingId, const std::string& why) {
  const bool noted = std::any_of(unreachable_.begin(), unreachable_.end(),
                                 [&](const Unreachable& entry) { return entry.routingId == routingId; });
  if (!noted) unreachable_.push_back(Unreachable{routingId, why});
}

}  // namespace wsync::coordinator
