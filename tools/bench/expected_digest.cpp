#include "gpu.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <wsync/bus/channel/device_checksum.hpp>

#include "device_content.hpp"

namespace wsync::bench {
namespace {

// Work is handed out in runs of this many words of one tensor, so a 1 GB embedding is shared by every thread.
constexpr std::uint64_t kWordsPerRun = std::uint64_t{1} << 22;
constexpr unsigned kMaxThreads = 16;

struct Run {
  std::uint32_t tensor = 0;
  std::uint64_t firstWord = 0;
  std::uint64_t endWord = 0;
  std::uint64_t tensorBytes = 0;
  std::uint64_t key = 0;
};

}  // namespace

bus::Digest expectedDeviceDigest(const bus::Manifest& manifest, std::uint64_t seed, std::uint64_t version) {
  std::vector<Run> runs;
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    const std::uint64_t bytes = manifest.tensorBytes(tensor);
    const std::uint64_t words = (bytes + 7) / 8;  // the last one zero-padded, as the device checksum reads it
    const std::uint64_t key = device_content::tensorKey(seed, tensor, version);
    for (std::uint64_t first = 0; first < words; first += kWordsPerRun) {
      runs.push_back(Run{tensor, first, std::min(words, first + kWordsPerRun), bytes, key});
    }
  }

  const unsigned threadCount = std::clamp(std::thread::hardware_concurrency(), 1U, kMaxThreads);
  std::vector<bus::DeviceChecksumSums> partial(threadCount);
  std::atomic<std::size_t> next{0};
  auto work = [&](unsigned thread) {
    bus::DeviceChecksumSums& sums = partial[thread];
    for (std::size_t index = next.fetch_add(1); index < runs.size(); index = next.fetch_add(1)) {
      const Run& run = runs[index];
      for (std::uint64_t word = run.firstWord; word < run.endWord; ++word) {
        std::uint64_t value = device_content::word(run.key, word);
        const std::uint64_t left = run.tensorBytes - word * 8;
        if (left < 8) value &= (std::uint64_t{1} << (8 * left)) - 1;  // the tail: its bytes, zero-padded
        bus::addDeviceChecksumWord(sums, run.tensor, word, value);
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned thread = 1; thread < threadCount; ++thread) threads.emplace_back(work, thread);
  work(0);
  for (std::thread& thread : threads) thread.join();

  // The lanes are sums modulo 2^64: partial sums add up to the whole, in any order.
  bus::DeviceChecksumSums total;
  for (const bus::DeviceChecksumSums& sums : partial) {
    total.lane[0] += sums.lane[0];
    total.lane[1] += sums.lane[1];
  }
  return bus::finishDeviceChecksum(total, manifest.totalBytes());
}

}  // namespace wsync::bench
