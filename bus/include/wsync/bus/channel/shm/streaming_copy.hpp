#pragma once
// A copy whose destination bypasses the caches (non-temporal stores), for the shm receiver writing a version into
// memory that nothing reads for a while. An ordinary store first reads every destination line from memory (a
// read-for-ownership) and then writes it back: streaming halves the receiver's memory traffic for the destination
// and keeps the arena's buckets, which the other receivers still read, in the cache.
#include <cstddef>
#include <cstdint>

namespace wsync::bus {

// Below this many bytes a plain memcpy: streaming stores pay off over whole cache lines, not a few of them.
inline constexpr std::uint64_t kStreamingCopyMinBytes = 4096;

// Copies `bytes` from `source` to `target` (no overlap). On targets without SSE2: memcpy.
void streamingCopy(std::byte* target, const std::byte* source, std::uint64_t bytes);

// Streaming stores are weakly ordered: call this before any store that tells another thread or process the bytes
// are there (a ticket, a transfer's result), or that store could become visible before them.
void finishStreamingCopies();

}  // namespace wsync::bus
