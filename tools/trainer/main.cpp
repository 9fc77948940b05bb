// wsync-trainer: stands in for a trainer. Publishes a synthetic model (a catalog model's tensors, perturbed every
// step) or a .safetensors checkpoint for K steps, and prints each version's outcome. With --channel nccl or
// cuda_ipc the model lives on a GPU: each step is computed on the host and uploaded before it is published.
#include <algorithm>
#include <csignal>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <cstdio>

#include "wsync/bus/channel/device_block.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/cli/curve_flags.hpp"
#include "wsync/cli/fault_injection.hpp"
#include "wsync/cli/log_flags.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/model_layouts.hpp"
#include "wsync/cli/progress_bar.hpp"
#include "wsync/cli/safetensors.hpp"
#include "wsync/trainer_agent/trainer_agent.hpp"

namespace {

using namespace wsync;
using trainer_agent::OutcomeKind;
using trainer_agent::PublishOutcome;

std::atomic<bool> stopRequested{false};
void requestStop(int) { stopRequested.store(true, std::memory_order_release); }

// After a refused or aborted version, the next attempt waits this long: a refusal for a round in progress or a
// busy bus is answered at once, and retrying in a tight loop would only flood the coordinator's log.
constexpr std::chrono::milliseconds kRetryPause{200};

// The weights the trainer publishes: one owned buffer per tensor, in manifest order.
struct Model {
  std::vector<bus::TensorSpec> specs;
  std::vector<std::vector<std::byte>> buffers;

  std::vector<std::span<const std::byte>> views() const {
    return std::vector<std::span<const std::byte>>(buffers.begin(), buffers.end());
  }
};

tl::expected<Model, std::string> loadModel(const std::string& name, std::uint64_t seed) {
  Model model;
  constexpr std::string_view kFile = "file:";
  if (name.starts_with(kFile)) {
    auto file = cli::SafetensorsFile::open(name.substr(kFile.size()));
    if (!file) return tl::unexpected(file.error().describe());
    model.specs = file->tensors();
    for (std::size_t index = 0; index < model.specs.size(); ++index) {
      const auto bytes = file->bytes(index);
      model.buffers.emplace_back(bytes.begin(), bytes.end());
    }
    return model;
  }
  auto specs = cli::modelTensors(name);
  if (!specs) return tl::unexpected(specs.error().describe());
  model.specs = std::move(*specs);
  auto manifest = bus::Manifest::create(model.specs);
  if (!manifest) return tl::unexpected(manifest.error().describe());
  for (std::size_t index = 0; index < model.specs.size(); ++index) {
    model.buffers.emplace_back(manifest->tensorBytes(index));
    cli::fillTensor(model.buffers.back(), seed, static_cast<std::uint32_t>(index));
  }
  return model;
}

void perturb(Model& model, std::uint64_t seed, std::uint64_t version) {
  for (std::size_t index = 0; index < model.buffers.size(); ++index) {
    cli::perturbTensor(model.buffers[index], seed, static_cast<std::uint32_t>(index), version);
  }
}

// The model's copy on a GPU for the nccl and cuda_ipc channels: one block, each tensor at an aligned offset (one
// allocation, as a training framework's flat parameter buffer would be).
struct DeviceModel {
  static constexpr std::uint64_t kAlignment = 256;
  bus::DeviceBlock block;
  std::vector<std::uint64_t> offsets;
  std::vector<std::span<const std::byte>> views;

  static tl::expected<DeviceModel, std::string> allocate(const Model& model, int device) {
    DeviceModel mirror;
    std::uint64_t offset = 0;
    for (const auto& buffer : model.buffers) {
      mirror.offsets.push_back(offset);
      offset += (buffer.size() + kAlignment - 1) / kAlignment * kAlignment;
    }
    auto block = bus::DeviceBlock::allocate(device, offset);
    if (!block) return tl::unexpected(block.error());
    mirror.block = std::move(*block);
    for (std::size_t index = 0; index < model.buffers.size(); ++index) {
      mirror.views.emplace_back(mirror.block.data() + mirror.offsets[index], model.buffers[index].size());
    }
    return mirror;
  }

  tl::expected<void, std::string> upload(const Model& model) {
    for (std::size_t index = 0; index < model.buffers.size(); ++index) {
      if (auto copied = block.upload(offsets[index], model.buffers[index]); !copied) return copied;
    }
    return {};
  }
};

// --print-manifest: a catalog model's tensors as one JSON array on stdout, [{"name", "dtype" (safetensors' name),
// "shape"}, ...] in manifest order, so that Python benchmarks publish the catalog's exact shapes without a copy of
// the catalog. Catalog names are plain ASCII; quotes and backslashes are escaped all the same.
int printManifest(const std::string& model) {
  auto specs = cli::modelTensors(model);
  if (!specs) {
    log::error("model '{}': {}", model, specs.error().describe());
    return 1;
  }
  std::string out = "[";
  for (std::size_t index = 0; index < specs->size(); ++index) {
    const auto& spec = (*specs)[index];
    std::string name;
    for (const char c : spec.name) {
      if (c == '"' || c == '\\') name += '\\';
      name += c;
    }
    out += fmt::format("{}{{\"name\": \"{}\", \"dtype\": \"{}\", \"shape\": [{}]}}", index == 0 ? "" : ",\n ", name,
                       bus::safetensorsName(spec.dtype), fmt::join(spec.shape, ", "));
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// --shard-skew (test only): each region's first row moves `rows` earlier (later when negative), clamped to the
// region's end; a region left without rows is dropped. Rank R > 0 then also holds rows of rank R - 1 (a partial
// overlap, which no sharding makes) or leaves rows that no rank holds (a gap): the layouts the coordinator must
// refuse, naming the tensor and the rows, before any engine pauses.
bus::SourceHoldings skewRows(bus::SourceHoldings holdings, std::int64_t rows) {
  bus::SourceHoldings skewed;
  for (bus::HeldRegion& held : holdings.regions) {
    if (!held.box.offset.empty()) {
      const std::int64_t end = held.box.offset[0] + held.box.extent[0];
      held.box.offset[0] = std::clamp<std::int64_t>(held.box.offset[0] - rows, 0, end);
      held.box.extent[0] = end - held.box.offset[0];
      if (held.box.extent[0] == 0) continue;
    }
    skewed.regions.push_back(std::move(held));
  }
  return skewed;
}

double millis(std::chrono::nanoseconds duration) { return std::chrono::duration<double, std::milli>(duration).count(); }

void logOutcome(const PublishOutcome& outcome) {
  if (outcome.committed()) {
    const double seconds = std::chrono::duration<double>(outcome.sending).count();
    log::info(
        "version {} committed in round {}: {:.1f} MB in {:.3f} ms (until plan {:.3f} ms, sending {:.3f} ms, "
        "{:.2f} GB/s)",
        outcome.version, outcome.round, static_cast<double>(outcome.bytes) / 1e6, millis(outcome.total),
        millis(outcome.untilPlan), millis(outcome.sending),
        seconds > 0 ? static_cast<double>(outcome.bytes) / seconds / 1e9 : 0.0);
  } else {
    log::warn("version {} {}: {}{}{}", outcome.version, toString(outcome.kind),
              outcome.kind == OutcomeKind::Aborted ? msg::EnumNameAbortReason(outcome.reason) : "",
              outcome.kind == OutcomeKind::Aborted ? ": " : "", outcome.detail);
  }
}

// Waits for the outcome of `version`, drawing a progress bar while its payload moves (on a terminal, and only for
// transfers longer than cli::kProgressBarDelay). Nothing when SIGINT or SIGTERM came first: stopping the agent then
// aborts the round in flight.
std::optional<PublishOutcome> waitWithProgress(trainer_agent::TrainerAgent& trainer, std::uint64_t version) {
  constexpr std::chrono::milliseconds kProgressPoll{50};  // a redraw needs no more (cli::kProgressBarRedraw)
  std::optional<cli::ProgressBar> bar;
  while (true) {
    if (auto outcome = trainer.waitOutcome(kProgressPoll)) return outcome;
    if (trainer.stopped() || stopRequested.load(std::memory_order_acquire)) return std::nullopt;
    const trainer_agent::PublishProgress progress = trainer.progress();
    if (progress.version != version || !progress.sending) continue;
    const auto now = std::chrono::steady_clock::now();
    if (!bar) bar.emplace("version " + std::to_string(version), now);
    bar->update(progress.bytesSent, progress.bytesTotal, now);
  }
}

}  // namespace

int main(int argc, char** argv) {
  trainer_agent::TrainerOptions options;
  options.agentId = "trainer-" + std::to_string(getpid());
  std::string model = "opt-125m";
  std::uint64_t steps = 10;
  std::uint64_t intervalMs = 0;
  std::uint64_t firstVersion = 0;
  std::uint64_t seed = 1;
  std::string pauseMode = "keep";
  std::string dumpPath;
  std::string fault;
  std::string channel = "shm";
  bool noPerturb = false;
  bool printOnly = false;
  std::string shard;

  CLI::App app{"wsync-trainer: publishes model versions to the workers of a bus"};
  app.add_option("--bus", options.bus, "bus name (required unless --print-manifest)");
  app.add_option("--transport", options.transport, "ipc or tcp://HOST:PORT")->capture_default_str();
  cli::CurveClientFlags curveFlags;
  curveFlags.addTo(app);
  app.add_option("--id", options.agentId, "agent id (default trainer-<pid>)");
  app.add_option("--rank", options.requestedRank, "trainer rank (default: assigned)");
  app.add_option("--model", model, "opt-125m | tiny | synthetic:COUNT:MIB | file:PATH.safetensors")
      ->capture_default_str();
  app.add_option("--steps", steps, "versions to publish (0: until SIGINT/SIGTERM)")->capture_default_str();
  app.add_option("--interval-ms", intervalMs, "pause between steps")->capture_default_str();
  app.add_option("--first-version", firstVersion, "first version (default: the committed version + 1)");
  app.add_option("--seed", seed, "content seed of a synthetic model")->capture_default_str();
  app.add_option("--pause-mode", pauseMode, "how workers pause: abort | wait | keep")
      ->capture_default_str()
      ->check(CLI::IsMember({"abort", "wait", "keep"}));
  app.add_option("--dump", dumpPath, "write the last committed version's weights to this .safetensors file");
  app.add_flag("--no-perturb", noPerturb, "publish the same bytes every step");
  app.add_flag("--print-manifest", printOnly,
               "print the --model catalog model's tensors as JSON ([{name, dtype, shape}]) and exit");
  app.add_option("--channel", channel,
                 "payload channel: shm (host memory, this host) | tcp (host memory, any host) | nccl | cuda_ipc (the "
                 "model on a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "tcp", "nccl", "cuda_ipc"}));
  app.add_option("--cuda-device", options.cudaDevice, "the GPU of the model (nccl, cuda_ipc)")->capture_default_str();
  std::int64_t linkTimeoutMs = options.link.timeout.count();
  app.add_option("--link-timeout-ms", linkTimeoutMs,
                 "silence of the coordinator after which its connection counts as lost (and the agent registers again)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{3'600'000}));
  app.add_option("--shard", shard,
                 "RANK/RANKS: this process is one rank of a sharded trainer and publishes only its rows of every "
                 "tensor (dim 0, as FSDP2 shards); every rank of the trainer runs with the same model and steps");
  app.add_option("--fault", fault, "TEST ONLY: ACTION@POINT:VERSION[+MS] (docs/faults.md)")->group("Testing");
  std::int64_t shardSkew = 0;
  app.add_option("--shard-skew", shardSkew,
                 "TEST ONLY: with --shard, this rank's rows of every tensor begin ROWS earlier (ROWS > 0: it also "
                 "holds rows of the rank before, a partial overlap) or later (ROWS < 0: rows that no rank holds, a "
                 "gap), clamped to the tensor; the coordinator must refuse the layout (tests/integration/"
                 "region_faults_test.cpp)")
      ->group("Testing");
  cli::LogFlags logFlags;
  logFlags.addTo(app);
  CLI11_PARSE(app, argc, argv);
  logFlags.apply("wsync-trainer");
  if (printOnly) return printManifest(model);
  if (shardSkew != 0 && shard.empty()) {
    log::error("--shard-skew moves the rows of a --shard rank: give --shard too");
    return 2;
  }
  if (options.bus.empty()) {
    log::error("--bus is required");
    return 2;
  }
  log::setAgent(options.agentId);
  if (auto curve = curveFlags.client()) {
    options.curve = std::move(*curve);
  } else {
    log::error("{}", curve.error());
    return 2;
  }

  if (!fault.empty()) {
    auto spec = cli::parseFaultSpec(fault);
    if (!spec) {
      log::error("--fault: {}", spec.error());
      return 2;
    }
    options.faultHook = std::make_shared<cli::FaultInjector>(*spec);
  }
  options.link.timeout = std::chrono::milliseconds(linkTimeoutMs);
  options.channel = bus::parseChannelName(channel).value_or(msg::ChannelKind::Shm);
  const msg::PauseMode mode = pauseMode == "abort"  ? msg::PauseMode::Abort
                              : pauseMode == "wait" ? msg::PauseMode::Wait
                                                    : msg::PauseMode::Keep;

  auto weights = loadModel(model, seed);
  if (!weights) {
    log::error("model '{}': {}", model, weights.error());
    return 1;
  }
  std::optional<DeviceModel> onDevice;
  if (bus::channelMemory(options.channel) == bus::TensorMemory::Device) {
    auto allocated = DeviceModel::allocate(*weights, options.cudaDevice);
    if (!allocated) {
      log::error("--channel {}: {}", channel, allocated.error());
      return 1;
    }
    onDevice = std::move(*allocated);
  }
  struct sigaction action {};
  action.sa_handler = requestStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  auto agent = trainer_agent::TrainerAgent::start(options);
  if (!agent) {
    log::error("{}", agent.error().describe());
    return 1;
  }
  trainer_agent::TrainerAgent& trainer = **agent;
  if (auto declared = trainer.declareManifest(weights->specs); !declared) {
    log::error("{}", declared.error().describe());
    return 1;
  }
  log::info("rank {}, {} tensors, {:.1f} MB per version, committed version {}", trainer.rank(), weights->specs.size(),
            static_cast<double>(trainer.manifest()->totalBytes()) / 1e6, trainer.committedVersion());
  std::optional<bus::SourceHoldings> holdings;
  if (!shard.empty()) {
    auto part = cli::parsePart(shard);
    if (!part) {
      log::error("--shard {}", part.error());
      return 2;
    }
    holdings = cli::rowShards(weights->specs, *part);
    if (shardSkew != 0) holdings = skewRows(std::move(*holdings), shardSkew);
    if (auto declared = trainer.declareHoldings(*holdings, part->rank, part->count); !declared) {
      log::error("--shard {}: {}", shard, declared.error().describe());
      return 1;
    }
    log::info("rank {} of {} of a sharded trainer: {} regions", part->rank, part->count, holdings->regions.size());
  }

  std::uint64_t version = std::max(firstVersion, trainer.committedVersion() + 1);
  std::uint64_t lastCommitted = 0;
  std::uint64_t failures = 0;
  const auto hostViews = weights->views();
  const auto& wholeViews = onDevice ? onDevice->views : hostViews;
  // A rank publishes its rows of each tensor: subspans of the whole model it steps like every other rank.
  const auto views = holdings ? cli::shardViews(*holdings, weights->specs, wholeViews) : wholeViews;
  bool uploaded = false;
  for (std::uint64_t step = 0; (steps == 0 || step < steps) && !stopRequested.load(); ++step) {
    if (version > bus::kMaxVersion) {
      log::error("version {} is above the highest a bus takes ({}): nothing more can be published", version,
                 bus::kMaxVersion);
      return 4;
    }
    if (!noPerturb) perturb(*weights, seed, version);
    if (onDevice && (!noPerturb || !uploaded)) {
      if (auto copied = onDevice->upload(*weights); !copied) {
        log::error("upload to the GPU: {}", copied.error());
        return 1;
      }
      uploaded = true;
    }
    trainer_agent::PublishOptions publishOptions;
    publishOptions.label = "step-" + std::to_string(step);
    publishOptions.pauseMode = mode;
    if (auto published = trainer.publish(version, views, publishOptions); !published) {
      log::error("{}", published.error().describe());
      return 1;
    }
    const auto outcome = waitWithProgress(trainer, version);
    if (!outcome) break;  // stopping
    logOutcome(*outcome);
    if (outcome->committed()) {
      lastCommitted = version;
      ++version;
    } else {
      ++failures;
      if (outcome->refusal == msg::ErrorCode::InvalidField) {
        log::error("version {} will never be accepted; stopping", version);
        break;
      }
      // Someone else committed meanwhile: go on above the bus's committed version (every refusal and every fate
      // report carries it). Otherwise the same version is tried again.
      version = std::max(version, trainer.committedVersion() + 1);
      std::this_thread::sleep_for(kRetryPause);
    }
    if (intervalMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(intervalMs));
  }
  trainer.stop();

  if (!dumpPath.empty() && lastCommitted != 0) {
    if (!noPerturb) perturb(*weights, seed, lastCommitted);  // perturbations are idempotent per version
    auto written =
        cli::writeSafetensors(dumpPath, weights->specs, hostViews, {{"wsync_version", std::to_string(lastCommitted)}});
    if (!written) {
      log::error("dump: {}", written.error().describe());
      return 1;
    }
  }
  log::info("done: last committed version {}, {} steps not committed", lastCommitted, failures);
  return failures == 0 ? 0 : 4;
}
