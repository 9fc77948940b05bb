#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace wsync::bus {

// Why a received buffer was rejected. Decoding is on the hot path and fuzzed, so this is a plain enum.
enum class MessageError : std::uint8_t {
  Empty,             // zero bytes
  TooLarge,          // over kMaxMessageBytes
  NotWsync,          // no "WSYN" file identifier: not one of our messages
  Unverifiable,      // the FlatBuffers Verifier refused it (truncated, corrupted, too deep, too many tables)
  ProtocolMismatch,  // verified, but written for another protocol version
  MissingBody,       // an envelope without a body
  BadFraming,        // the ZeroMQ frames around it were not what the socket pattern sends
  Misaligned,        // verifyMessage() got a buffer not aligned for in-place reads (a caller's mistake)
  EnumOutOfRange,    // an enum-typed field holds a value its enum does not declare (describeEnumViolation says which)
};
inline constexpr std::size_t kMessageErrorCount = 9;

std::string_view toString(MessageError error);

}  // namespace wsync::bus
