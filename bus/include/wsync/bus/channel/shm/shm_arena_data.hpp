#pragma once
// The layout of a shm payload arena (docs/shm-channel.md): a header, per-buffer fill state written by the sender,
// per-(buffer, receiver) drain state written by each receiver, then bufferCount buffers of bucketBytes. Plain
// data: address-free lock-free atomics and offsets only.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "wsync/bus/state/control_block_data.hpp"

namespace wsync::bus {

inline constexpr std::uint64_t kArenaMagic = 0x3141524e4359534bULL;  // "KSYCNRA1" read little-endian
inline constexpr std::uint32_t kArenaLayoutVersion = 1;
inline constexpr std::size_t kMaxArenaBuffers = 8;
inline constexpr std::size_t kMaxArenaReceivers = 64;
// Buffers start at this alignment, so buckets suit any copy engine and AVX stores.
inline constexpr std::size_t kArenaBufferAlignment = 4096;

// Written once by the creator before `magic` (release).
struct alignas(kCacheLineBytes) ArenaHeaderData {
  std::atomic<std::uint64_t> magic;
  std::uint32_t layoutVersion;
  std::uint32_t bufferCount;
  std::uint64_t bucketBytes;
  std::uint64_t dataOffset;  // first buffer, from the segment start
  std::uint64_t segmentBytes;
  std::uint32_t maxReceivers;
  std::uint32_t reserved;
  std::atomic<std::uint64_t> abortedTransfer;  // writer: the arena's owner; waiters of this transfer give up
};

// Writer: the sender.
struct alignas(kCacheLineBytes) ArenaFillData {
  std::atomic<std::uint64_t> ticket;  // (transfer << 32) | (bucket + 1) of the bucket in the buffer
  std::atomic<std::uint32_t> notify;  // bumped after every fill: the futex word receivers sleep on
  std::uint32_t reserved;
};

// Writer: one receiver.
struct alignas(kCacheLineBytes) ArenaDrainData {
  std::atomic<std::uint64_t> ticket;  // the last ticket this receiver copied out of the buffer
  std::atomic<std::uint32_t> notify;  // bumped after every drain: the futex word the sender sleeps on
  std::uint32_t reserved;
};

struct ArenaControlData {
  ArenaHeaderData header;
  ArenaFillData fills[kMaxArenaBuffers];
  ArenaDrainData drains[kMaxArenaBuffers][kMaxArenaReceivers];
};

static_assert(std::is_standard_layout_v<ArenaControlData>);
static_assert(sizeof(ArenaHeaderData) == 64);
static_assert(sizeof(ArenaFillData) == 64 && sizeof(ArenaDrainData) == 64);
static_assert(sizeof(ArenaControlData) == 64 + kMaxArenaBuffers * 64 + kMaxArenaBuffers * kMaxArenaReceivers * 64);

}  // namespace wsync::bus
