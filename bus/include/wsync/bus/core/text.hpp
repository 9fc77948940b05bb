#pragma once
// How the programs print identifiers, the same everywhere: lowercase hex, fixed width.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace wsync::bus {

// Two digits a byte, in order ("nccl:" keys, unique ids).
std::string hexBytes(std::span<const std::byte> bytes);
std::string hexBytes(std::span<const std::uint8_t> bytes);
// 16 digits: epochs, as wsync-ctl status and the coordinator's start line print them.
std::string hex64(std::uint64_t value);
// 32 digits, high word first: a 128-bit digest (manifests, payloads).
std::string hex128(std::uint64_t hi, std::uint64_t lo);

// This host's name (gethostname), or empty if it has none: how agents say where they run.
std::string hostName();

}  // namespace wsync::bus
