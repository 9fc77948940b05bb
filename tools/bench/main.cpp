// wsync-bench: wsync measured against raw baselines in the same run, so that machine noise hits both alike.
//
//   wsync-bench bus|shm|round|soak|gpu [--quick] [--out FILE] [--json FILE] [--commit SHA] [options of the mode]
//
// The agent-* subcommands are hidden: they are the agent processes the modes start from this executable, each given
// its options as one JSON argument.
#include <csignal>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "bus.hpp"
#include "round.hpp"
#include "shm.hpp"
#include "soak.hpp"
#include "wsync/bus/core/log.hpp"
#ifdef WSYNC_HAVE_CUDA
#include "gpu.hpp"
#endif

namespace wsync::bench {
namespace {

// A mode with the options every mode has.
CLI::App& addMode(CLI::App& app, const std::string& name, const std::string& description, ModeOptions& options) {
  CLI::App& mode = *app.add_subcommand(name, description);
  mode.add_flag("--quick", options.quick, "A demonstration in seconds: too few samples for conclusions");
  mode.add_option("--out", options.outPath, "Also write the markdown report to this file");
  mode.add_option("--json", options.jsonPath, "Write the results as JSON to this file");
  mode.add_option("--commit", options.commit, "Commit to name in the report (default: git describe)");
  return mode;
}

// An option whose default --help shows; a list of them, comma-separated.
template <typename T>
CLI::Option* option(CLI::App& app, const std::string& name, T& value, const std::string& help) {
  return app.add_option(name, value, help)->capture_default_str();
}
template <typename T>
CLI::Option* list(CLI::App& app, const std::string& name, std::vector<T>& values, const std::string& help) {
  return option(app, name, values, help)->delimiter(',');
}

// A quick run's value of an option, unless the command line gave one.
template <typename T, typename Quick>
void quickDefault(bool quick, const CLI::Option* option, T& value, Quick quickValue) {
  if (quick && option->count() == 0) value = quickValue;
}

#ifdef WSYNC_HAVE_CUDA
// The command line as typed, quoted where a shell would need it, for reports that say how they were made.
std::string commandLine(int argc, char** argv) {
  std::string line = "wsync-bench";
  for (int index = 1; index < argc; ++index) {
    const std::string arg = argv[index];
    if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/+@%") ==
                            std::string::npos) {
      line += " " + arg;
      continue;
    }
    line += " '";
    for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += "'";
  }
  return line;
}
#endif

// An agent: hidden (an empty group), started by a mode, never by hand. Ctrl-C reaches the whole process group: agents
// leave stopping to the benchmark, which reports the interruption instead of a dead agent.
template <typename Options>
void addAgent(CLI::App& app, const std::string& name, int& status, int (*run)(const Options&)) {
  CLI::App& agent = *app.add_subcommand(name, "internal")->group("");
  auto options = std::make_shared<std::string>();
  agent.add_option("options", *options, "JSON")->required();
  agent.callback([&status, run, options] {
    std::signal(SIGINT, SIG_IGN);
    status = run(nlohmann::json::parse(*options).get<Options>());
  });
}

}  // namespace
}  // namespace wsync::bench

int main(int argc, char** argv) {
  using namespace wsync::bench;
  // The coordinator and agents may run in this process: a line per round would cost what is measured, and hide the
  // results. Warnings and errors still show.
  wsync::log::configure({.program = "wsync-bench", .level = spdlog::level::warn});
  CLI::App app{"wsync-bench: wsync measured against raw baselines, side by side in the same run"};
  app.require_subcommand(1);
  int status = 0;
  const auto positive = CLI::PositiveNumber;

  BusBenchConfig bus;
  CLI::App& busMode = addMode(app, "bus", "Control-plane latency through the bus library vs raw ZeroMQ, and the "
                              "shared-memory version read", bus.mode);
  auto* roundTrips = option(busMode, "--round-trips", bus.roundTrips, "Measured round trips per path")->check(positive);
  auto* pauses = option(busMode, "--iterations", bus.pauseRounds, "Measured pause rounds per path, each N")
                     ->check(positive);
  option(busMode, "--block", bus.block, "Iterations per block; blocks alternate bus and raw")->check(positive);
  list(busMode, "--agents", bus.agentCounts, "Agent process counts N for the fan-out")
      ->check(CLI::Range(std::size_t{1}, kMaxBenchAgents));
  auto* reads = option(busMode, "--version-reads", bus.versionReads, "Version reads per repetition")->check(positive);
  busMode.callback([&] {
    quickDefault(bus.mode.quick, roundTrips, bus.roundTrips, kQuickRoundTrips);
    quickDefault(bus.mode.quick, pauses, bus.pauseRounds, kQuickPauseRounds);
    quickDefault(bus.mode.quick, reads, bus.versionReads, kQuickVersionReads);
    if (bus.mode.quick) bus.versionRepetitions = kQuickVersionRepetitions;
    status = runMode("bus", bus.mode, [&](Report& report) { runBusBenchmark(bus, report); });
  });

  ShmBenchConfig shm;
  CLI::App& shmMode = addMode(app, "shm", "The shm payload channel, one sender process to 1, 3 and 8 receiver "
                              "processes, vs memcpy", shm.mode);
  auto* models = list(shmMode, "--models", shm.models, "Models (names cli::modelTensors knows)");
  auto* fanout = list(shmMode, "--fanout", shm.fanoutReceivers, "Receiver counts of the fan-out")
                     ->check(CLI::Range(std::size_t{2}, std::size_t{64}));
  bool noFanout = false;
  shmMode.add_flag("--no-fanout", noFanout, "Only the one-receiver measurements")->excludes(fanout);
  list(shmMode, "--bucket-mib", shm.bucketMiB, "Bucket sizes in MiB: one receiver with each, the fan-out with the "
       "first")->check(CLI::Range(1, 4096));
  list(shmMode, "--buffers", shm.buffers, "Buffer counts of the arena's ring, likewise")->check(CLI::Range(2, 8));
  auto* reps = option(shmMode, "--repetitions", shm.repetitions, "Timed repetitions per path")->check(positive);
  shmMode.add_flag("--wait-for-quiet", shm.waitForQuiet,
                   "Start every round once the machine's CPUs were 90% idle for 0.5 s (shared machines)");
  shmMode.callback([&] {
    quickDefault(shm.mode.quick, models, shm.models, std::vector<std::string>{"opt-125m"});
    quickDefault(shm.mode.quick, fanout, shm.fanoutReceivers, std::vector<std::size_t>{3});
    quickDefault(shm.mode.quick, reps, shm.repetitions, kQuickShmRepetitions);
    if (noFanout) shm.fanoutReceivers.clear();
    status = runMode("shm", shm.mode, [&](Report& report) { runShmBenchmark(shm, report); });
  });

  RoundBenchConfig round;
  CLI::App& roundMode = addMode(app, "round", "An update round's control overhead (round time minus data time) for "
                                "1, 8 and 32 worker processes and by number of tensors, vs the raw ZeroMQ round trip; "
                                "with --monitors, round times with wsync-mon processes attached", round.mode);
  const auto workerRange = CLI::Range(std::size_t{1}, kMaxRoundWorkers);
  list(roundMode, "--workers", round.workerCounts, "Worker process counts")->check(workerRange);
  list(roundMode, "--models", round.models, "Manifests of the worker sweep (names cli::modelTensors knows)");
  auto* countModels = list(roundMode, "--count-models", round.countModels, "Manifests of the tensor-count sweep: "
                           "same bytes, different tensor counts");
  bool noCountSweep = false;
  roundMode.add_flag("--no-count-sweep", noCountSweep, "Only the worker sweep")->excludes(countModels);
  option(roundMode, "--count-workers", round.countWorkers, "Workers of the tensor-count sweep")->check(workerRange);
  auto* warmup = option(roundMode, "--warmup", round.warmup, "Unmeasured rounds first")->check(positive);
  auto* rounds = option(roundMode, "--rounds", round.rounds, "Measured rounds per worker count")->check(positive);
  auto* countRounds = option(roundMode, "--count-rounds", round.countRounds, "Measured rounds per count manifest")
                          ->check(positive);
  auto* baseline = option(roundMode, "--round-trips", round.baselineRoundTrips, "Baseline round trips per path, "
                          "before and after")->check(positive);
  option(roundMode, "--bucket-kib", round.bucketKiB, "The coordinator's bucket size in KiB (a multiple of 4)")
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{4} << 20));
  option(roundMode, "--monitors", round.monitors, "wsync-mon processes attached to each bus of the worker sweep for "
         "--rounds more rounds, between two phases without (goal: round times under 2% apart)")
      ->check(CLI::Range(std::size_t{0}, kMaxMonitors));
  roundMode.callback([&] {
    quickDefault(round.mode.quick, warmup, round.warmup, std::size_t{5});
    quickDefault(round.mode.quick, rounds, round.rounds, std::size_t{40});
    quickDefault(round.mode.quick, countRounds, round.countRounds, std::size_t{10});
    quickDefault(round.mode.quick, baseline, round.baselineRoundTrips, std::size_t{500});
    if (noCountSweep) round.countModels.clear();
    status = runMode("round", round.mode, [&](Report& report) { runRoundBenchmark(round, report); });
  });

  SoakBenchConfig soak;
  CLI::App& soakMode = addMode(app, "soak", "Thousands of rounds back to back through the real wsync-coordinator and "
                               "wsync-worker processes, with random worker restarts: rounds/s, round time, RSS and "
                               "open fds over time (goal: flat)", soak.mode);
  auto* soakRounds = option(soakMode, "--rounds", soak.rounds, "Rounds in all (a multiple of --window)")
                         ->check(positive);
  option(soakMode, "--workers", soak.workers, "wsync-worker processes")->check(workerRange);
  auto* window = option(soakMode, "--window", soak.window, "Rounds per window of figures (the first is a warm-up; "
                        "the second and the last run without restarts)")->check(positive);
  auto* restartEvery = option(soakMode, "--restart-every", soak.restartEvery, "Mean rounds between worker restarts "
                              "(SIGKILL at a random moment, then the same id again); 0: none");
  option(soakMode, "--seed", soak.seed, "Seed of the restart schedule");
  option(soakMode, "--model", soak.model, "Manifest (names cli::modelTensors knows)");
  option(soakMode, "--pause-mode", soak.pauseMode, "The trainer's pause mode")
      ->check(CLI::IsMember({"abort", "wait", "keep"}));
  option(soakMode, "--step-ms", soak.workerStepMs, "The workers' decode step (wsync-worker --step-ms)")
      ->check(CLI::Range(0, 1000));
  soakMode.add_option("--bin-dir", soak.binDir, "Folder of wsync-coordinator and wsync-worker (default: beside "
                      "wsync-bench, else this build's)");
  option(soakMode, "--child-log-level", soak.childLogLevel, "--log-level of the coordinator and workers")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  soakMode.callback([&] {
    quickDefault(soak.mode.quick, soakRounds, soak.rounds, kQuickSoakRounds);
    quickDefault(soak.mode.quick, window, soak.window, kQuickSoakWindow);
    quickDefault(soak.mode.quick, restartEvery, soak.restartEvery, kQuickSoakRestartEvery);
    status = runMode("soak", soak.mode, [&](Report& report) { runSoakBenchmark(soak, report); });
  });

#ifdef WSYNC_HAVE_CUDA
  GpuBenchConfig gpu;
  CLI::App& gpuMode = addMode(app, "gpu", "The nccl and cuda_ipc channels between GPU processes, vs one raw "
                              "ncclBroadcast / cudaMemcpy of the same bytes", gpu.mode);
  auto* channels = list(gpuMode, "--channel", gpu.channels, "Channels to measure")
                       ->check(CLI::IsMember({"nccl", "cuda_ipc"}));
  auto* gpuModels = list(gpuMode, "--models", gpu.models, "Models (names cli::modelTensors knows, e.g. "
                         "synthetic:1000:512 for a quick run)");
  gpuMode.add_option("--receivers", gpu.receivers, "Receiver processes (default: nccl, one per other visible GPU; "
                     "cuda_ipc, 1)")->check(CLI::Range(1, 64));
  list(gpuMode, "--devices", gpu.ipcDevices, "cuda_ipc: the sender's GPU and the receivers' GPU")
      ->expected(2)
      ->check(CLI::NonNegativeNumber);
  list(gpuMode, "--bucket-mib", gpu.bucketMiB, "nccl bucket size in MiB; a list measures each (cuda_ipc plans with "
       "the first)")->check(CLI::Range(1, 16384));
  auto* gpuWarmup = option(gpuMode, "--warmup", gpu.warmup, "Unmeasured rounds per measurement")
                        ->check(CLI::NonNegativeNumber);
  auto* gpuReps = option(gpuMode, "--reps", gpu.repetitions, "Timed rounds per path and measurement")->check(positive);
  option(gpuMode, "--allocation", gpu.allocation, "tensor: one cudaMalloc per tensor; torch: segments as PyTorch's "
         "caching allocator makes them")->check(CLI::IsMember({"tensor", "torch"}));
  bool noHostCheck = false;
  gpuMode.add_flag("--no-host-check", noHostCheck, "Skip recomputing the first channel round's digest on the host");
  gpuMode.callback([&] {
    quickDefault(gpu.mode.quick, gpuModels, gpu.models, std::vector<std::string>{"qwen2.5-7b"});
    quickDefault(gpu.mode.quick, gpuWarmup, gpu.warmup, kQuickGpuWarmup);
    quickDefault(gpu.mode.quick, gpuReps, gpu.repetitions, kQuickGpuRepetitions);
    gpu.channelsGiven = channels->count() > 0;
    gpu.hostCheck = !noHostCheck;
    gpu.commandLine = commandLine(argc, argv);
    status = runMode("gpu", gpu.mode, [&](Report& report) { runGpuBenchmark(gpu, report); });
  });
  addAgent(app, "agent-gpu-rank", status, &runGpuRank);
#else
  // Listed, so that asking for it says why it is missing rather than "unknown subcommand".
  CLI::App& gpuMode = *app.add_subcommand("gpu", "The GPU channels vs raw NCCL and cudaMemcpy (not in this build)");
  gpuMode.allow_extras();
  gpuMode.callback([&] {
    std::cerr << "wsync-bench gpu: this build has no GPU channels (configure with -DWSYNC_CUDA=ON on a host with the "
                 "CUDA Toolkit and NCCL's header)\n";
    status = 1;
  });
#endif

  addAgent(app, "agent-roundtrip", status, &runRoundTripAgent);
  addAgent(app, "agent-pause", status, &runPauseAgent);
  addAgent(app, "agent-shm-receive", status, &runShmReceiver);
  addAgent(app, "agent-round-worker", status, &runRoundWorker);

  CLI11_PARSE(app, argc, argv);
  return status;
}
