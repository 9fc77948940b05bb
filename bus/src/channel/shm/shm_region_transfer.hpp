#pragma once
// Region transfers over shm rings (docs/shm-channel.md, "Region transfers"): a source sends its stream
// (region_stream.hpp) through its own ring, a receiver takes its deliveries from one source's ring. ShmChannel's
// sendRegions and receiveRegions are these, over the rings they open.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {

// Source `source` packs its segments from `buffers` (indexed like its holdings' regions) into `ring`, bucket by
// bucket, each bucket refilled once the receivers of its previous occupant have drained it; returns once every
// receiver has drained every bucket it takes, with what each receiver was sent (indexed by receiver). `progress`
// gets the segment bytes packed so far after each bucket.
tl::expected<RegionTransferResult, ChannelFailure> sendRegionStream(const ShmArena& ring, std::uint64_t transfer,
                                                                    const RegionPlan& plan, std::uint32_t source,
                                                                    std::span<const std::span<const std::byte>> buffers,
                                                                    std::chrono::steady_clock::time_point deadline,
                                                                    const std::function<void(std::uint64_t)>& progress,
                                                                    const std::function<bool()>& cancelled);

// Receiver `receiver` takes its deliveries from source `source` out of `ring` into `locals` (indexed like its
// bindings' local tensors), copying only the buckets that hold one; returns what it took. `progress` gets the bytes
// taken from this source so far after each bucket.
tl::expected<PairResult, ChannelFailure> receiveRegionStream(
    const ShmArena& ring, std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline,
    const std::function<void(std::uint64_t)>& progress, const std::function<bool()>& cancelled);

}  // namespace wsync::bus
