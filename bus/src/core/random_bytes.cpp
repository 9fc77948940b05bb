#include "wsync/bus/core/random_bytes.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace wsync::bus {

tl::expected<void, std::string> fillRandom(std::span<std::uint8_t> bytes) {
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t got = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return tl::unexpected(std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<std::size_t>(got);
  }
  return {};
}

}  // namespace wsync::bus
