#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include <wsync/bus/state/control_block.hpp>

#include "bench_failure.hpp"
#include "bus.hpp"

namespace wsync::bench {
namespace {

// Tells the compiler `value` is used and memory may have changed, so the read can be neither dropped nor hoisted out
// of the loop; it emits no instruction.
inline void keep(std::uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

template <typename Read>
double nanosecondsPerRead(Read&& read, std::uint64_t reads) {
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < reads; ++i) keep(read());
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(reads);
}

ReadCost costOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return ReadCost{values[values.size() / 2], values.front()};
}

// A warm-up (page-in, caches, clock frequency), then the timed repetitions; with a second read, the two alternate,
// the order flipping every repetition, so that machine noise hits both alike.
template <typename First, typename Second>
std::pair<ReadCost, ReadCost> timeReads(const BusBenchConfig& config, First&& first, Second&& second) {
  std::vector<double> firstNs;
  std::vector<double> secondNs;
  (void)nanosecondsPerRead(first, config.versionReads / 10);
  (void)nanosecondsPerRead(second, config.versionReads / 10);
  for (std::size_t rep = 0; rep < config.versionRepetitions; ++rep) {
    throwIfInterrupted();
    if (rep % 2 == 1) secondNs.push_back(nanosecondsPerRead(second, config.versionReads));
    firstNs.push_back(nanosecondsPerRead(first, config.versionReads));
    if (rep % 2 == 0) secondNs.push_back(nanosecondsPerRead(second, config.versionReads));
  }
  return {costOf(std::move(firstNs)), costOf(std::move(secondNs))};
}

template <typename Read>
ReadCost timeRead(const BusBenchConfig& config, Read&& read) {
  std::vector<double> ns;
  (void)nanosecondsPerRead(read, config.versionReads / 10);
  for (std::size_t rep = 0; rep < config.versionRepetitions; ++rep) {
    throwIfInterrupted();
    ns.push_back(nanosecondsPerRead(read, config.versionReads));
  }
  return costOf(std::move(ns));
}

}  // namespace

VersionReadResult runVersionReadBenchmark(const BusBenchConfig& config, std::ostream& progress) {
  progress << "version read: " << config.versionRepetitions << " x " << config.versionReads << " reads per kind\n";
  const std::string busName = "wsync-bench-" + std::to_string(::getpid()) + "-cb";
  const std::string agentId = "version-reader";
  // The coordinator's side creates the block and gives a slot; the agent attaches to it and owns its fields; a
  // separate read-only mapping reads, as a process tagging outputs would.
  auto owner = orThrow(bus::ControlBlockOwner::create(busName), "control block");
  const std::optional<std::uint32_t> maybeSlot = owner.findFreeSlot();
  if (!maybeSlot) throw BenchFailure("control block: no free slot");
  const std::uint32_t slot = *maybeSlot;
  orThrow(owner.assignSlot(slot, {agentId, msg::Role::Worker, 0, static_cast<std::uint32_t>(::getpid())}),
          "control block");
  auto writer = orThrow(bus::AgentSlotWriter::attach(busName, slot, agentId, 1), "control block");
  const auto view = orThrow(bus::ControlBlockView::open(busName), "control block");
  // The process-local baseline, on a cache line of its own like the slot's field.
  struct alignas(64) LocalVersion {
    std::atomic<std::uint64_t> value{1};
  };
  const auto local = std::make_unique<LocalVersion>();
  const auto readShared = [&view, slot] { return view.appliedVersion(slot); };
  const auto readLocal = [&local] { return local->value.load(std::memory_order_acquire); };

  VersionReadResult result;
  std::tie(result.shared, result.local) = timeReads(config, readShared, readLocal);
  // Contended: a thread writing nonstop, the worst case for a reader, whose cache line is taken away on every write.
  // One writer at a time, so that on a small machine the reader keeps a core to itself.
  {
    const std::jthread busy([&writer](const std::stop_token& stop) {
      for (std::uint64_t version = 1; !stop.stop_requested(); ++version) writer.setAppliedVersion(version);
    });
    result.sharedContended = timeRead(config, readShared);
  }
  {
    const std::jthread busy([&local](const std::stop_token& stop) {
      for (std::uint64_t version = 1; !stop.stop_requested(); ++version) {
        local->value.store(version, std::memory_order_release);
      }
    });
    result.localContended = timeRead(config, readLocal);
  }
  return result;
}

}  // namespace wsync::bench
