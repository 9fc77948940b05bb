#include "wsync/bus/core/text.hpp"

#include <unistd.h>

#include <array>

namespace wsync::bus {

namespace {

constexpr char kDigits[] = "0123456789abcdef";

void appendHex(std::string& text, std::uint64_t value, int digits) {
  for (int digit = digits - 1; digit >= 0; --digit) text.push_back(kDigits[(value >> (4 * digit)) & 0xFU]);
}

}  // namespace

std::string hexBytes(std::span<const std::uint8_t> bytes) {
  std::string text;
  text.reserve(2 * bytes.size());
  for (const std::uint8_t value : bytes) appendHex(text, value, 2);
  return text;
}

std::string hexBytes(std::span<const std::byte> bytes) {
  return hexBytes(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}

std::string hex64(std::uint64_t value) {
  std::string text;
  text.reserve(16);
  appendHex(text, value, 16);
  return text;
}

std::string hex128(std::uint64_t hi, std::uint64_t lo) { return hex64(hi) + hex64(lo); }

std::string hostName() {
  // POSIX allows 255 bytes and leaves a name of exactly the buffer's size unterminated: one byte more, zeroed.
  std::array<char, 257> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return {};
  return name.data();
}

}  // namespace wsync::bus
