#include "wsync/bus/channel/shm/streaming_copy.hpp"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace wsync::bus {

void streamingCopy(std::byte* target, const std::byte* source, std::uint64_t bytes) {
#if defined(__SSE2__)
  if (bytes < kStreamingCopyMinBytes) {
    std::memcpy(target, source, bytes);
    return;
  }
  constexpr std::uint64_t kLine = 64;
  // Streaming stores need 16-byte aligned targets, and only whole lines avoid a partial write-combining flush: the
  // head up to the target's next line boundary goes by memcpy. Sources may sit anywhere (unaligned loads).
  const auto misalignment = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(target) % kLine);
  const std::uint64_t head = misalignment == 0 ? 0 : kLine - misalignment;
  std::memcpy(target, source, head);
  target += head;
  source += head;
  bytes -= head;
  const std::uint64_t body = bytes / kLine * kLine;
  for (std::uint64_t offset = 0; offset < body; offset += kLine) {
    // Four loads, then four stores: a whole line at a time fills one write-combining buffer.
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + offset));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + offset + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + offset + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + offset + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(target + offset), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(target + offset + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(target + offset + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(target + offset + 48), d);
  }
  std::memcpy(target + body, source + body, bytes - body);
#else
  std::memcpy(target, source, bytes);
#endif
}

void finishStreamingCopies() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace wsync::bus
