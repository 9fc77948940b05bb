#pragma once
// Bytes from the kernel's CSPRNG (getrandom), for what a stranger must not predict from what it has seen: a tcp
// admission token, a registration secret.
#include <cstdint>
#include <span>
#include <string>

#include <tl/expected.hpp>

namespace wsync::bus {

// Fills `bytes`, or says why it could not (the kernel refused: no entropy source at all).
tl::expected<void, std::string> fillRandom(std::span<std::uint8_t> bytes);

}  // namespace wsync::bus
