#pragma once
// The order in which the bus and raw paths run. Both sides of a measurement (the coordinator and the round-trip
// agent) compute the same schedule from the same numbers, so each knows which socket the next message uses.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wsync::bench {

enum class Path : std::uint8_t { Bus, Raw };

std::string_view toString(Path path);

struct Block {
  Path path = Path::Bus;
  std::size_t count = 0;
  bool measured = false;
};

// A warm-up block per path, then `iterations` per path in blocks of `block`, alternating bus and raw and
// flipping the order every pair (bus raw, raw bus, ...) so that drifting machine load hits both paths alike.
std::vector<Block> interleavedSchedule(std::size_t iterations, std::size_t warmup, std::size_t block);

}  // namespace wsync::bench
