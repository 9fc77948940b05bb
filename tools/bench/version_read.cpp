#include "bus.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <wsync/bus/state/control_block.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Tells the compiler `value` is used and memory may have changed, so the read can be neither dropped nor hoisted out
// of the loop; it emits no instruction.
inline void keep(std::uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

template <typename Read>
double nanosecondsPerRead(Read&& read, std::uint64_t reads) {
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < reads; ++i) keep(read());
  const auto elapsed = std::chrono::duration<double, std::nano>(Clock::now() - start);
  return elapsed.count() / static_cast<double>(reads);
}

ReadCost costOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return ReadCost{values[values.size() / 2], values.front()};
}

// Alternates the two reads repetition by repetition, so that machine noise hits both alike.
template <typename SharedRead, typename LocalRead>
std::pair<ReadCost, ReadCost> timeBoth(const BusBenchConfig& config, SharedRead&& shared, LocalRead&& local) {
  std::vector<double> sharedNs;
  std::vector<double> localNs;
  (void)nanosecondsPerRead(shared, config.versionReads / 10);  // warm-up: page-in, caches, clock frequency
  (void)nanosecondsPerRead(local, config.versionReads / 10);
  for (std::size_t rep = 0; rep < config.versionRepetitions; ++rep) {
    throwIfInterrupted();
    if (rep % 2 == 0) {
      sharedNs.push_back(nanosecondsPerRead(shared, config.versionReads));
      localNs.push_back(nanosecondsPerRead(local, config.versionReads));
    } else {
      localNs.push_back(nanosecondsPerRead(local, config.versionReads));
      sharedNs.push_back(nanosecondsPerRead(shared, config.versionReads));
    }
  }
  return {costOf(std::move(sharedNs)), costOf(std::move(localNs))};
}

template <typename Read>
ReadCost timeOne(const BusBenchConfig& config, Read&& read) {
  std::vector<double> ns;
  (void)nanosecondsPerRead(read, config.versionReads / 10);
  for (std::size_t rep = 0; rep < config.versionRepetitions; ++rep) {
    throwIfInterrupted();
    ns.push_back(nanosecondsPerRead(read, config.versionReads));
  }
  return costOf(std::move(ns));
}

// A thread that keeps writing new versions until destroyed: the worst case for a reader, whose cache line is
// taken away on every write.
class BusyWriter {
 public:
  template <typename Write>
  explicit BusyWriter(Write write)
      : thread_([this, write] {
          for (std::uint64_t version = 1; !stop_.load(std::memory_order_relaxed); ++version) write(version);
        }) {}
  BusyWriter(const BusyWriter&) = delete;
  BusyWriter& operator=(const BusyWriter&) = delete;
  ~BusyWriter() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

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

  auto readShared = [&view, slot] { return view.appliedVersion(slot); };
  auto readLocal = [&local] { return local->value.load(std::memory_order_acquire); };
  VersionReadResult result;
  std::tie(result.shared, result.local) = timeBoth(config, readShared, readLocal);
  // Contended: one writer thread at a time, so that on a small machine the reader keeps a core to itself.
  {
    const BusyWriter busy([&writer](std::uint64_t version) { writer.setAppliedVersion(version); });
    result.sharedContended = timeOne(config, readShared);
  }
  {
    const BusyWriter busy([&local](std::uint64_t version) { local->value.store(version, std::memory_order_release); });
    result.localContended = timeOne(config, readLocal);
  }
  return result;
}

}  // namespace wsync::bench
