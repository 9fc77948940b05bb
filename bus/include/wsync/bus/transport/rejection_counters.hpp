#pragma once
#include <array>
#include <cstdint>

#include "wsync/bus/protocol/message_error.hpp"

namespace wsync::bus {

// Rejected messages by reason, kept by each socket. Like the socket itself, it belongs to one thread.
class RejectionCounters {
 public:
  void count(MessageError error) { ++counts_[static_cast<std::size_t>(error)]; }
  std::uint64_t of(MessageError error) const { return counts_[static_cast<std::size_t>(error)]; }
  std::uint64_t total() const {
    std::uint64_t sum = 0;
    for (std::uint64_t count : counts_) sum += count;
    return sum;
  }

 private:
  std::array<std::uint64_t, kMessageErrorCount> counts_{};
};

}  // namespace wsync::bus
