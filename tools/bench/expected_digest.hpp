#pragma once
// The host check of `wsync-bench gpu`: the device checksum (wsync/bus/device_checksum.hpp) that a version of the
// benchmark's content (device_content.hpp) must have, computed on the host from the content's formula. A channel's
// digest equal to it says that the channel's device checksum matches its host reference, and that the bytes the
// sender held were the version the benchmark meant.
#include <cstdint>

#include <wsync/bus/protocol/manifest.hpp>

namespace wsync::bench {

// Spreads the work over the host's cores (up to 16): 61 GB take a few seconds.
bus::Digest expectedDeviceDigest(const bus::Manifest& manifest, std::uint64_t seed, std::uint64_t version);

}  // namespace wsync::bench
