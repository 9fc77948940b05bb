#include "wsync/bus/protocol/client_text.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace wsync::bus {
namespace {

// Length of the well-formed UTF-8 sequence starting text[at] (RFC 3629: no overlongs, no surrogates, at most
// U+10FFFF), or 0 when there is none.
std::size_t utf8SequenceLength(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

bool isControl(unsigned char c) { return c < 0x20 || c == 0x7F; }

}  // namespace

std::string printableText(std::string_view text, std::size_t maxBytes) {
  std::string out;
  const std::size_t kept = std::min(text.size(), maxBytes);
  out.reserve(kept + 16);
  std::size_t at = 0;
  while (at < kept) {
    const auto c = static_cast<unsigned char>(text[at]);
    if (c < 0x80 && !isControl(c) && c != '\\') {
      out += static_cast<char>(c);
      ++at;
      continue;
    }
    if (c >= 0x80) {
      const std::size_t length = utf8SequenceLength(text, at);
      if (length != 0 && at + length <= kept) {
        out.append(text.substr(at, length));
        at += length;
        continue;
      }
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += escaped;
    ++at;
  }
  if (text.size() > kept) out += "... (" + std::to_string(text.size() - kept) + " more bytes)";
  return out;
}

std::string checkClientText(std::string_view what, std::string_view text, std::size_t maxBytes) {
  if (text.size() > maxBytes) {
    return std::string(what) + " of " + std::to_string(text.size()) + " bytes is longer than " +
           std::to_string(maxBytes);
  }
  for (std::size_t at = 0; at < text.size();) {
    const auto c = static_cast<unsigned char>(text[at]);
    if (isControl(c)) {
      return std::string(what) + " '" + printableText(text) + "' has a control byte at offset " + std::to_string(at);
    }
    if (c < 0x80) {
      ++at;
      continue;
    }
    const std::size_t length = utf8SequenceLength(text, at);
    if (length == 0) {
      return std::string(what) + " '" + printableText(text) + "' is not UTF-8 at offset " + std::to_string(at);
    }
    at += length;
  }
  return {};
}

std::string checkAgentId(std::string_view agentId) {
  if (agentId.empty() || agentId.size() > kMaxAgentIdBytes) {
    return "agent id must be 1 to " + std::to_string(kMaxAgentIdBytes) + " bytes, not " +
           std::to_string(agentId.size());
  }
  for (std::size_t at = 0; at < agentId.size(); ++at) {
    const auto c = static_cast<unsigned char>(agentId[at]);
    if (c <= 0x20 || c >= 0x7F) {
      return "agent id '" + printableText(agentId) + "' has a byte that is not printable ASCII at offset " +
             std::to_string(at) + " (spaces included)";
    }
  }
  return {};
}

}  // namespace wsync::bus
