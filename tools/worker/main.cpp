// wsync-worker: stands in for an inference engine. Real weight buffers bound to a worker agent, a decode loop
// that reads them and tags every token with the applied version, and the three pause modes.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "engine.hpp"
#include "model_weights.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/cli/curve_flags.hpp"
#include "wsync/cli/fault_injection.hpp"
#include "wsync/cli/log_flags.hpp"
#include "wsync/worker_agent/pause_gate.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

namespace {

using namespace wsync;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
// How often the signal thread looks up from sigtimedwait to see whether the worker is done anyway.
constexpr std::chrono::milliseconds kSignalPoll{100};

}  // namespace

int main(int argc, char** argv) {
  worker_agent::WorkerOptions options;
  options.agentId = "worker-" + std::to_string(getpid());
  std::string model = "opt-125m";
  std::string fault;
  std::string dumpPath;
  std::int64_t stepMs = 5;
  std::uint64_t exitAfterVersion = 0;
  bool quiet = false;
  std::string channel = "shm";
  worker_app::EngineOptions engineOptions;

  CLI::App app{"wsync-worker: a stand-in inference engine whose weights are updated over a wsync bus"};
  app.add_option("--bus", options.bus, "bus name")->required();
  app.add_option("--transport", options.transport, "ipc (this user, this host) or tcp://HOST:PORT")
      ->capture_default_str();
  app.add_option("--id", options.agentId, "agent id (default worker-<pid>)");
  app.add_option("--rank", options.requestedRank, "rank to ask for (-1: the coordinator picks)")->capture_default_str();
  app.add_option("--model", model, "opt-125m | tiny | synthetic:COUNT:MIB | file:PATH.safetensors (its shapes)")
      ->capture_default_str();
  app.add_option("--requests", engineOptions.requests, "requests to serve (0: endless)")->capture_default_str();
  app.add_option("--tokens", engineOptions.tokens, "tokens per request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", engineOptions.concurrency, "requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1'000'000U));
  app.add_option("--step-ms", stepMs, "time per decode step in ms")
      ->capture_default_str()
      ->check(CLI::Range(0, 60'000));
  app.add_option("--outputs", engineOptions.outputsPath,
                 "JSON lines, one per request: request, tokens, aborted, spans");
  app.add_option("--dump", dumpPath, "write the weights here at exit (safetensors, metadata wsync_version)");
  auto* exitAfter = app.add_option("--exit-after-version", exitAfterVersion,
                                   "stop once this version is applied and the in-flight requests are done");
  std::string slice;
  app.add_option("--slice", slice,
                 "RANK/RANKS: this worker is one rank of a tensor-parallel engine and receives only its columns of "
                 "each tensor (the last dim); --dump then writes those slices");
  app.add_option("--fault", fault, "TEST ONLY: ACTION@POINT:VERSION[+MS] | corrupt-receive@VERSION (docs/faults.md)")
      ->group("Testing");
  std::int64_t sliceSkew = 0;
  app.add_option("--slice-skew", sliceSkew,
                 "TEST ONLY: with --slice, this worker's columns of every sliced tensor begin COLUMNS later, its "
                 "local tensors unchanged; columns taken past a tensor's end are a region that no source holds, "
                 "which the coordinator must refuse, naming the worker (tests/integration/region_faults_test.cpp)")
      ->group("Testing");
  app.add_option("--channel", channel,
                 "shm or tcp: weights in host memory (the worker takes both); nccl or cuda_ipc: weights on a GPU, "
                 "received in place while paused")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "tcp", "nccl", "cuda_ipc"}));
  app.add_option("--cuda-device", options.cudaDevice, "the GPU of the weights (nccl, cuda_ipc)")->capture_default_str();
  std::int64_t linkTimeoutMs = options.link.timeout.count();
  app.add_option("--link-timeout-ms", linkTimeoutMs,
                 "silence of the coordinator after which its connection counts as lost (and the agent registers again)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{3'600'000}));
  app.add_flag("-q,--quiet", quiet, "log only warnings and errors (unless --log-level says otherwise)");
  cli::LogFlags logFlags;
  logFlags.addTo(app);
  cli::CurveClientFlags curveFlags;
  curveFlags.addTo(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? kExitOk : kExitUsage;
  }
  logFlags.apply("wsync-worker");
  if (quiet && !logFlags.levelGiven()) log::logger()->set_level(spdlog::level::warn);
  log::setAgent(options.agentId);
  if (auto curve = curveFlags.client()) {
    options.curve = std::move(*curve);
  } else {
    log::error("{}", curve.error());
    return kExitUsage;
  }
  if (!fault.empty()) {
    auto spec = cli::parseFaultSpec(fault);
    if (!spec) {
      log::error("--fault: {}", spec.error());
      return kExitUsage;
    }
    options.faultHook = std::make_shared<cli::FaultInjector>(*spec);
  }
  options.link.timeout = std::chrono::milliseconds(linkTimeoutMs);
  engineOptions.step = std::chrono::milliseconds(stepMs);
  if (exitAfter->count() > 0) engineOptions.exitAfterVersion = exitAfterVersion;

  // Signals go to one thread that waits for them, so that stopping can close the gate (which a handler could not
  // do safely): every thread started from here on inherits the mask. Before anything starts threads: the CUDA
  // runtime starts its own when the weights are allocated on a GPU, and a thread that does not block SIGTERM would
  // take its default action, killing the worker before it can dump or say goodbye.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);

  // A worker takes every channel its weights' memory allows; the trainer's --channel picks one per round.
  const bool onGpu =
      bus::channelMemory(bus::parseChannelName(channel).value_or(msg::ChannelKind::Shm)) == bus::TensorMemory::Device;
  options.bindingMemory = onGpu ? worker_agent::BindingMemory::Device : worker_agent::BindingMemory::Host;
  std::optional<cli::Part> part;
  if (!slice.empty()) {
    auto parsed = cli::parsePart(slice);
    if (!parsed) {
      log::error("--slice {}", parsed.error());
      return kExitUsage;
    }
    part = *parsed;
  }
  if (sliceSkew != 0 && !part) {
    log::error("--slice-skew moves the columns of a --slice worker: give --slice too");
    return kExitUsage;
  }
  auto weights =
      worker_app::ModelWeights::load(model, onGpu ? std::optional<int>(options.cudaDevice) : std::nullopt, part);
  if (!weights) {
    log::error("--model {}: {}", model, weights.error().detail);
    return weights.error().usage ? kExitUsage : kExitError;
  }
  if (sliceSkew != 0) weights->skewSlices(sliceSkew);
  if (auto bound = weights->bindAll(options.bindings); !bound) {
    log::error("{}", bound.error().describe());
    return kExitError;
  }

  worker_agent::PauseGate gate;
  worker_agent::PauseHooks hooks;
  hooks.pause = [&gate](msg::PauseMode mode, std::uint64_t) -> worker_agent::PauseResult {
    if (!gate.pause(mode)) return tl::unexpected(std::string("the engine had not quiesced"));
    return {};
  };
  hooks.withdraw = [&gate](std::uint64_t) { gate.withdraw(); };
  hooks.resume = [&gate](std::uint64_t) { gate.resume(); };
  hooks.applied = [](std::uint64_t version, std::uint64_t round) {
    log::info("version {} applied (round {})", version, round);
  };
  const std::string busName = options.bus;
  auto agent = worker_agent::WorkerAgent::start(std::move(options), std::move(hooks));
  if (!agent) {
    log::error("cannot join bus '{}': {}", busName, agent.error().describe());
    return kExitError;
  }
  log::info("rank {} on bus '{}', model {} ({} tensors, {} bytes), serving version {}", (*agent)->rank(), busName,
            model, weights->tensors().size(), weights->totalBytes(), (*agent)->appliedVersion());

  std::atomic<bool> stopRequested{false};
  std::atomic<bool> done{false};
  std::thread signalThread([&] {
    const timespec poll{0, static_cast<long>(std::chrono::nanoseconds(kSignalPoll).count())};
    while (!done.load(std::memory_order_acquire)) {
      if (sigtimedwait(&stopSignals, nullptr, &poll) > 0) {
        stopRequested.store(true, std::memory_order_release);
        gate.close();  // a parked engine wakes and stops
      }
    }
  });

  worker_app::Engine engine(
      engineOptions, *weights, gate, [raw = agent->get()] { return raw->appliedVersion(); }, stopRequested);
  auto summary = engine.run();
  // The engine has stopped: a pause from now on must not wait for it.
  gate.close();
  (*agent)->stop();
  done.store(true, std::memory_order_release);
  signalThread.join();

  int status = kExitOk;
  if (!summary) {
    log::error("{}", summary.error());
    status = kExitError;
  } else if (summary->inconsistentOutputs != 0) {
    log::error("{} outputs with inconsistent version spans", summary->inconsistentOutputs);
    status = kExitError;
  }
  const std::uint64_t finalVersion = (*agent)->appliedVersion();
  if (!dumpPath.empty()) {
    // After stop(): the I/O thread is gone, so no commit can write the weights while they are read.
    if (auto dumped = weights->dump(dumpPath, finalVersion); !dumped) {
      log::error("--dump {}: {}", dumpPath, dumped.error());
      status = kExitError;
    }
  }
  if (summary) {
    const auto counters = (*agent)->counters();
    log::info(
        "stopped at version {}: {} requests ({} aborted), {} tokens; rounds: {} applied, {} aborted, {} "
        "refused, {} failed transfers (weight checksum {:016x})",
        finalVersion, summary->requestsEnded, summary->requestsAborted, summary->tokens, counters.roundsApplied,
        counters.roundsAborted, counters.roundsRefused, counters.transfersFailed, summary->weightChecksum);
  }
  return status;
}
