// wsync-worker: stands in for an inference engine. Real weight buffers bound to a worker agent, a decode loop
// that reads them and tags every token with the applied version, and the three pause modes.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "engine.hpp"
#include "model_weights.hpp"
#include "wsync/worker_agent/pause_gate.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

namespace {

using namespace wsync;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
// How often the signal thread looks up from sigtimedwait to see whether the worker is done anyway.
constexpr std::chrono::milliseconds kSignalPoll{100};

// "corrupt-receive@V" or "die-during-receive@V".
std::optional<worker_agent::WorkerFaults> parseFault(const std::string& text) {
  const auto at = text.find('@');
  if (at == std::string::npos) return std::nullopt;
  const std::string kind = text.substr(0, at);
  std::uint64_t version = 0;
  const char* begin = text.data() + at + 1;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(begin, end, version);
  if (begin == end || parsed.ec != std::errc() || parsed.ptr != end) return std::nullopt;
  worker_agent::WorkerFaults faults;
  if (kind == "corrupt-receive") {
    faults.corruptReceiveAtVersion = version;
  } else if (kind == "die-during-receive") {
    faults.dieDuringReceiveAtVersion = version;
  } else {
    return std::nullopt;
  }
  return faults;
}

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
  app.add_option("--tokens", engineOptions.tokens, "tokens per request")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--concurrency", engineOptions.concurrency, "requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1'000'000U));
  app.add_option("--step-ms", stepMs, "time per decode step in ms")->capture_default_str()->check(CLI::Range(0, 60'000));
  app.add_option("--outputs", engineOptions.outputsPath, "JSON lines, one per request: request, tokens, aborted, spans");
  app.add_option("--dump", dumpPath, "write the weights here at exit (safetensors, metadata wsync_version)");
  auto* exitAfter = app.add_option("--exit-after-version", exitAfterVersion,
                                   "stop once this version is applied and the in-flight requests are done");
  app.add_option("--fault", fault, "TEST ONLY: corrupt-receive@V | die-during-receive@V");
  app.add_option("--channel", channel,
                 "shm: weights in host memory; nccl or cuda_ipc: weights on a GPU, received in place while paused")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "nccl", "cuda_ipc"}));
  app.add_option("--cuda-device", options.cudaDevice, "the GPU of the weights (nccl, cuda_ipc)")->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no lines on stdout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? kExitOk : kExitUsage;
  }
  if (!fault.empty()) {
    auto faults = parseFault(fault);
    if (!faults) {
      std::fprintf(stderr, "wsync-worker: --fault '%s': use corrupt-receive@VERSION or die-during-receive@VERSION\n",
                   fault.c_str());
      return kExitUsage;
    }
    options.faults = *faults;
  }
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
  const bool onGpu = channel != "shm";
  options.bindingMemory = onGpu ? worker_agent::BindingMemory::Device : worker_agent::BindingMemory::Host;
  auto weights = worker_app::ModelWeights::load(model, onGpu ? std::optional<int>(options.cudaDevice) : std::nullopt);
  if (!weights) {
    std::fprintf(stderr, "wsync-worker: --model %s: %s\n", model.c_str(), weights.error().detail.c_str());
    return weights.error().usage ? kExitUsage : kExitError;
  }
  if (auto bound = weights->bindAll(options.bindings); !bound) {
    std::fprintf(stderr, "wsync-worker: %s\n", bound.error().describe().c_str());
    return kExitError;
  }

  worker_agent::PauseGate gate;
  const std::string id = options.agentId;
  worker_agent::PauseHooks hooks;
  hooks.pause = [&gate](msg::PauseMode mode, std::uint64_t) { gate.pause(mode); };
  hooks.resume = [&gate](std::uint64_t) { gate.resume(); };
  hooks.applied = [&id, quiet](std::uint64_t version, std::uint64_t round) {
    if (quiet) return;
    std::printf("wsync-worker %s: version %llu applied (round %llu)\n", id.c_str(),
                static_cast<unsigned long long>(version), static_cast<unsigned long long>(round));
    std::fflush(stdout);
  };
  const std::string busName = options.bus;
  auto agent = worker_agent::WorkerAgent::start(std::move(options), std::move(hooks));
  if (!agent) {
    std::fprintf(stderr, "wsync-worker %s: cannot join bus '%s': %s\n", id.c_str(), busName.c_str(),
                 agent.error().describe().c_str());
    return kExitError;
  }
  if (!quiet) {
    std::printf("wsync-worker %s: rank %d on bus '%s', model %s (%zu tensors, %llu bytes), serving version %llu\n",
                id.c_str(), (*agent)->rank(), busName.c_str(), model.c_str(), weights->tensors().size(),
                static_cast<unsigned long long>(weights->totalBytes()),
                static_cast<unsigned long long>((*agent)->appliedVersion()));
    std::fflush(stdout);
  }

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

  worker_app::Engine engine(engineOptions, *weights, gate, [raw = agent->get()] { return raw->appliedVersion(); },
                            stopRequested);
  auto summary = engine.run();
  // The engine has stopped: a pause from now on must not wait for it.
  gate.close();
  (*agent)->stop();
  done.store(true, std::memory_order_release);
  signalThread.join();

  int status = kExitOk;
  if (!summary) {
    std::fprintf(stderr, "wsync-worker %s: %s\n", id.c_str(), summary.error().c_str());
    status = kExitError;
  } else if (summary->inconsistentOutputs != 0) {
    std::fprintf(stderr, "wsync-worker %s: %llu outputs with inconsistent version spans\n", id.c_str(),
                 static_cast<unsigned long long>(summary->inconsistentOutputs));
    status = kExitError;
  }
  const std::uint64_t finalVersion = (*agent)->appliedVersion();
  if (!dumpPath.empty()) {
    // After stop(): the I/O thread is gone, so no commit can write the weights while they are read.
    if (auto dumped = weights->dump(dumpPath, finalVersion); !dumped) {
      std::fprintf(stderr, "wsync-worker %s: --dump %s: %s\n", id.c_str(), dumpPath.c_str(), dumped.error().c_str());
      status = kExitError;
    }
  }
  if (!quiet && summary) {
    const auto counters = (*agent)->counters();
    std::printf("wsync-worker %s: stopped at version %llu: %llu requests (%llu aborted), %llu tokens; rounds: %llu "
                "applied, %llu aborted, %llu refused, %llu failed transfers (weight checksum %016llx)\n",
                id.c_str(), static_cast<unsigned long long>(finalVersion),
                static_cast<unsigned long long>(summary->requestsEnded),
                static_cast<unsigned long long>(summary->requestsAborted),
                static_cast<unsigned long long>(summary->tokens),
                static_cast<unsigned long long>(counters.roundsApplied),
                static_cast<unsigned long long>(counters.roundsAborted),
                static_cast<unsigned long long>(counters.roundsRefused),
                static_cast<unsigned long long>(counters.transfersFailed),
                static_cast<unsigned long long>(summary->weightChecksum));
  }
  return status;
}
