// `wsync-bench shm-regions`: region rounds over shm (shm_regions.hpp). Every source and receiver is a thread with a
// channel of its own, opened once over the rings of a real ShmChannelOwner, as the agents' processes open them; a
// round starts every side at once and ends with the last side's return, and its pair digests are checked against each
// other every round. The baseline, in the same run with the same threads' count of receivers: each receiver
// memcpy's as many bytes as it receives, all at once from a common start, timed the same way.
#include "shm_regions.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <wsync/bus/channel/shm/shm_channel.hpp>
#include <wsync/bus/channel/shm/shm_channel_owner.hpp>
#include <wsync/bus/protocol/dtype.hpp>

#include "bench_failure.hpp"
#include "region_layouts.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Far above a round of a few hundred MB on two cores; only a broken hand-off comes near it.
constexpr std::chrono::seconds kShmRegionRoundTimeout{120};

using Buffers = std::vector<std::vector<std::byte>>;

// Every side's buffers, written once (each page touched before any timing): the sources' held regions, the
// receivers' local tensors.
struct Sides {
  std::vector<Buffers> sources;
  std::vector<Buffers> receivers;
};

Sides sidesOf(const bus::RegionPlan& plan) {
  Sides sides;
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    Buffers buffers;
    for (const bus::HeldRegion& held : plan.holdings(s).regions) {
      std::vector<std::byte> buffer(bus::volume(held.box) * bus::elementBytes(plan.tensors()[held.tensor].dtype));
      for (std::size_t at = 0; at < buffer.size(); ++at) buffer[at] = static_cast<std::byte>((at * 131 + s) & 0xFF);
      buffers.push_back(std::move(buffer));
    }
    sides.sources.push_back(std::move(buffers));
  }
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    Buffers locals;
    for (const bus::LocalTensor& local : plan.bindings(r).locals) {
      locals.emplace_back(bus::volume(bus::wholeBox(local.shape)) * bus::elementBytes(local.dtype), std::byte{1});
    }
    sides.receivers.push_back(std::move(locals));
  }
  return sides;
}

template <typename Byte>
std::vector<std::span<Byte>> spansOf(Buffers& buffers) {
  return {buffers.begin(), buffers.end()};
}

// Runs `work(index)` for `count` threads from one start instant; returns the time from it to the last one's end.
template <typename Work>
double timedAtOnce(std::size_t count, const Work& work) {
  std::atomic<bool> go{false};
  std::vector<Clock::time_point> ends(count);
  std::vector<std::thread> threads;
  for (std::size_t index = 0; index < count; ++index) {
    threads.emplace_back([&, index] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      work(index);
      ends[index] = Clock::now();
    });
  }
  // Every thread started and spinning: then the start.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& thread : threads) thread.join();
  const auto last = *std::max_element(ends.begin(), ends.end());
  return std::chrono::duration<double, std::milli>(last - start).count();
}

struct ShmRegionRow {
  std::uint64_t receivedBytes = 0;  // the most one receiver receives
  std::vector<double> roundMs;
  std::vector<double> memcpyMs;
};

// One round: every side at once; the pair digests of both sides must agree.
double regionRound(const bus::RegionPlan& plan, Sides& sides, std::vector<std::unique_ptr<bus::ShmChannel>>& channels,
                   std::uint64_t transfer) {
  const std::uint32_t sources = plan.sourceCount();
  std::vector<tl::expected<bus::RegionTransferResult, bus::ChannelFailure>> results(
      sources + plan.receiverCount(), tl::unexpected(bus::ChannelFailure{bus::ChannelError::Unsupported, "not run"}));
  const auto deadline = Clock::now() + kShmRegionRoundTimeout;
  const double ms = timedAtOnce(results.size(), [&](std::size_t side) {
    const auto index = static_cast<std::uint32_t>(side);
    if (index < sources) {
      const auto buffers = spansOf<const std::byte>(sides.sources[index]);
      results[side] = channels[side]->sendRegions(transfer, plan, index, buffers, deadline);
    } else {
      const auto locals = spansOf<std::byte>(sides.receivers[index - sources]);
      results[side] = channels[side]->receiveRegions(transfer, plan, index - sources, locals, deadline);
    }
  });
  for (std::size_t side = 0; side < results.size(); ++side) {
    if (!results[side]) throw BenchFailure("side " + std::to_string(side) + ": " + results[side].error().describe());
  }
  for (std::uint32_t s = 0; s < sources; ++s) {
    for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
      if ((*results[s])[r] != (*results[sources + r])[s]) {
        throw BenchFailure("source " + std::to_string(s) + " and receiver " + std::to_string(r) + " disagree");
      }
    }
  }
  return ms;
}

ShmRegionRow measure(const ShmRegionBenchConfig& config, const std::string& model, bool tp2, std::uint32_t sources) {
  const Layout layout = layoutOf(model, sources, tp2);
  const bus::RegionPlan plan = planOf(layout);
  const bus::ArenaGeometry geometry{.bucketBytes = config.bucketMiB << 20, .bufferCount = config.buffers};
  auto owner = bus::ShmChannelOwner::create("bench-shm-regions-" + std::to_string(::getpid()), geometry);
  if (!owner) throw BenchFailure("arena: " + owner.error().describe());
  const std::vector<bus::ChannelMember> sourceMembers(sources);
  const std::vector<bus::ChannelMember> receiverMembers(plan.receiverCount());
  auto grant = (*owner)->prepareSources(sourceMembers, receiverMembers);
  if (!grant) throw BenchFailure("rings: " + grant.error());
  std::vector<std::unique_ptr<bus::ShmChannel>> channels;
  for (std::uint32_t side = 0; side < sources + plan.receiverCount(); ++side) {
    auto channel = bus::ShmChannel::open(grant->segment);
    if (!channel) throw BenchFailure("open: " + channel.error().describe());
    channels.push_back(std::move(*channel));
  }
  Sides sides = sidesOf(plan);
  ShmRegionRow row;
  std::vector<Buffers> copies;  // per receiver: what it memcpy's from and into
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    row.receivedBytes = std::max(row.receivedBytes, plan.bytesReceived(r));
    Buffers pair(2, std::vector<std::byte>(plan.bytesReceived(r), std::byte{2}));
    copies.push_back(std::move(pair));
  }
  for (std::size_t rep = 0; rep < config.warmup + config.reps; ++rep) {
    // Rotated, so that neither path always runs first.
    double round = 0;
    double copy = 0;
    auto memcpyAll = [&] {
      return timedAtOnce(copies.size(), [&](std::size_t r) {
        std::memcpy(copies[r][1].data(), copies[r][0].data(), copies[r][0].size());
      });
    };
    if (rep % 2 == 0) {
      round = regionRound(plan, sides, channels, rep + 1);
      copy = memcpyAll();
    } else {
      copy = memcpyAll();
      round = regionRound(plan, sides, channels, rep + 1);
    }
    if (rep < config.warmup) continue;
    row.roundMs.push_back(round);
    row.memcpyMs.push_back(copy);
  }
  return row;
}

}  // namespace

void runShmRegionBenchmark(const ShmRegionBenchConfig& config, Report& report) {
  report.parameters().update(Json{{"models", config.models},
                                  {"sources", config.sources},
                                  {"layouts", config.layouts},
                                  {"bucket_mib", config.bucketMiB},
                                  {"buffers", config.buffers},
                                  {"warmup", config.warmup},
                                  {"reps", config.reps},
                                  {"cores", std::thread::hardware_concurrency()}});
  Table table({{"model", "model"},
               {"receivers", "receivers"},
               {"sources", "M sources"},
               {"received_mib", "MiB per receiver"},
               {"round_ms", "round (ms)"},
               {"memcpy_ms", "memcpy (ms)"},
               {"ratio", "memcpy / round"},
               {"goal", ">= 0.8x"}});
  for (const std::string& model : config.models) {
    for (const std::string& layoutName : config.layouts) {
      for (const std::uint32_t sources : config.sources) {
        std::cerr << "shm-regions: " << model << ", " << layoutName << ", " << sources << " sources\n";
        const bool tp2 = layoutName == "tp2";
        ShmRegionRow row;
        try {
          row = measure(config, model, tp2, sources);
        } catch (const std::exception& error) {
          table.row({model, layoutName, sources, "", "", "", "",
                     Cell(Json(nullptr), std::string("skipped: ") + error.what())});
          continue;
        }
        const Summary round = summarize(row.roundMs);
        const Summary copy = summarize(row.memcpyMs);
        const double ratioValue = round.median > 0 ? copy.median / round.median : 0;
        table.row({model, tp2 ? "2 TP halves" : "1 whole", sources,
                   number(static_cast<double>(row.receivedBytes) / (1 << 20), 1), spread(round, "ms", 1),
                   spread(copy, "ms", 1), ratio(ratioValue), verdict(ratioValue >= kMinShmRegionToMemcpyRatio)});
      }
    }
  }
  report.section(
      "rounds", "Region rounds over shm vs memcpy of the bytes each receiver receives",
      "M sources hold FSDP2 dim-0 shards (cli::rowShards); the receivers bind every tensor whole, or tensor-parallel "
      "halves (row-parallel o_proj and down_proj by their last dim, the rest by dim 0). Every side a thread with its "
      "own channel over a real arena and rings. A round: from a common start to the last side's return (the "
      "sources' packs into their rings with XXH3 streamed, the receivers' copies out with theirs, the pair digests "
      "compared); memcpy: each receiver's bytes memcpy'd by as many threads, from a common start, in the same run. "
      "Medians (range); the ratio is memcpy's time over the round's (1.0: as fast as memcpy).",
      table);
}

}  // namespace wsync::bench
