#include "samples_file.hpp"

#include <cstdio>
#include <fstream>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

// "WSBENCH1" read little-endian: a file of another format or a truncated one is refused, never misread.
constexpr std::uint64_t kSamplesMagic = 0x31484e4542535357ULL;

void writeWord(std::ofstream& out, std::uint64_t word) {
  out.write(reinterpret_cast<const char*>(&word), sizeof(word));
}

std::uint64_t readWord(std::ifstream& in) {
  std::uint64_t word = 0;
  in.read(reinterpret_cast<char*>(&word), sizeof(word));
  return word;
}

void writeVector(std::ofstream& out, const std::vector<std::uint64_t>& values) {
  writeWord(out, values.size());
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(std::uint64_t)));
}

std::vector<std::uint64_t> readVector(std::ifstream& in, const std::string& path) {
  const std::uint64_t count = readWord(in);
  // More than a billion samples is a corrupted count, not a run.
  if (!in || count > (std::uint64_t{1} << 30)) throw BenchFailure("malformed samples file " + path);
  std::vector<std::uint64_t> values(static_cast<std::size_t>(count));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(std::uint64_t)));
  if (!in) throw BenchFailure("truncated samples file " + path);
  return values;
}

}  // namespace

void writeSamples(const std::string& path, const RoundTripSamples& samples) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  writeWord(out, kSamplesMagic);
  writeVector(out, samples.busNs);
  writeVector(out, samples.rawNs);
  out.close();
  if (!out) throw BenchFailure("cannot write samples file " + path);
}

RoundTripSamples takeSamples(const std::string& path) {
  RoundTripSamples samples;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw BenchFailure("the round-trip agent left no samples file " + path);
    if (readWord(in) != kSamplesMagic) throw BenchFailure("not a samples file: " + path);
    samples.busNs = readVector(in, path);
    samples.rawNs = readVector(in, path);
  }
  std::remove(path.c_str());
  return samples;
}

}  // namespace wsync::bench
