#include "schedule.hpp"

#include <algorithm>

namespace wsync::bench {

std::string_view toString(Path path) { return path == Path::Bus ? "bus" : "raw"; }

std::vector<Block> interleavedSchedule(std::size_t iterations, std::size_t warmup, std::size_t block) {
  std::vector<Block> schedule;
  if (warmup > 0) {
    schedule.push_back({Path::Bus, warmup, false});
    schedule.push_back({Path::Raw, warmup, false});
  }
  const std::size_t blockSize = std::max<std::size_t>(block, 1);
  std::size_t pair = 0;
  for (std::size_t done = 0; done < iterations; done += blockSize, ++pair) {
    const std::size_t count = std::min(blockSize, iterations - done);
    const bool busFirst = pair % 2 == 0;
    schedule.push_back({busFirst ? Path::Bus : Path::Raw, count, true});
    schedule.push_back({busFirst ? Path::Raw : Path::Bus, count, true});
  }
  return schedule;
}

}  // namespace wsync::bench
