#pragma once
// The shm channel's copies that digest what they move (docs/shm-channel.md, "Hand-off"): into a bucket on the
// sender, out of one on a receiver, each in slices so that the digest reads what the copy has just brought into
// L1/L2 instead of reading the whole run (up to a bucket) from memory a second time.
#include <cstddef>
#include <cstdint>

#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {

// The sender: copies `bytes` of a tensor into a bucket and digests the tensor's bytes. Ordinary stores: the
// receivers read the bucket next, and should find it in the cache.
void packAndDigest(std::byte* target, const std::byte* source, std::uint64_t bytes, StreamDigest& digest);

// A receiver: copies `bytes` out of a bucket into its tensor with streaming stores (nothing reads the new version
// before the round commits, and a cached destination line costs a read from memory first) and digests the bytes it
// copied, from the bucket slice the copy has just brought into L1. The bucket cannot change between the two reads
// unnoticed: the sender only refills a buffer its receivers have drained, and the ticket is checked again after
// the copy (ShmArena::publishDrained). This is the receiver's whole cost per byte, so the one that decides the
// channel's speed. The caller orders the streaming stores (finishStreamingCopies) before it says they are done.
void unpackAndDigest(std::byte* target, const std::byte* source, std::uint64_t bytes, StreamDigest& digest);

}  // namespace wsync::bus
