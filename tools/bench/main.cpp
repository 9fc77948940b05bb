// wsync-bench: wsync measured against raw baselines in the same run, so that machine noise hits both alike.
//
//   wsync-bench bus [--quick] [--out FILE] [--json FILE] ...   control plane and version read (report on stdout)
//   wsync-bench shm [--quick] [--out FILE] [--json FILE] ...   the shm payload channel against memcpy
//   wsync-bench round [--quick] [--out FILE] [--json FILE] ... an update round's control overhead
//   wsync-bench soak [--quick] [--out FILE] [--json FILE] ...  10,000 rounds through the real programs with worker
//                                                              restarts: does anything grow?
//   wsync-bench gpu [--quick] [--out FILE] [--json FILE] ...   the nccl and cuda_ipc channels against raw NCCL and
//                                                              cudaMemcpy (builds with WSYNC_HAVE_CUDA)
//
// The agent-* subcommands are hidden: they are the agent processes that `bus`, `shm`, `round` and `gpu` start from
// this executable.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "agent_main.hpp"
#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "interruption.hpp"
#include "latency_benchmark.hpp"
#include "machine_info.hpp"
#include "report.hpp"
#include "report_format.hpp"
#include "round_benchmark.hpp"
#include "round_config.hpp"
#include "round_report.hpp"
#include "round_worker.hpp"
#include "shm_benchmark.hpp"
#include "shm_config.hpp"
#include "shm_receiver.hpp"
#include "shm_report.hpp"
#include "soak_benchmark.hpp"
#include "soak_config.hpp"
#include "soak_report.hpp"
#include "version_read.hpp"
#include "wsync/bus/core/log.hpp"

#ifdef WSYNC_HAVE_CUDA
#include "gpu_benchmark.hpp"
#include "gpu_config.hpp"
#include "gpu_info.hpp"
#include "gpu_rank.hpp"
#include "gpu_report.hpp"
#endif

namespace wsync::bench {
namespace {

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw BenchFailure("cannot write " + path);
}

// The markdown on stdout, and the copies the options ask for.
void publish(const std::string& markdown, const std::string& json, const std::string& outPath,
             const std::string& jsonPath) {
  std::cout << markdown << std::flush;
  if (!outPath.empty()) {
    writeFile(outPath, markdown);
    std::cerr << "report written to " << outPath << '\n';
  }
  if (!jsonPath.empty()) {
    writeFile(jsonPath, json);
    std::cerr << "JSON written to " << jsonPath << '\n';
  }
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int runBusMode(const BusBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  BusBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.versionRead = runVersionReadBenchmark(config, std::cerr);
  report.latency = runLatencyBenchmarks(config, std::cerr);
  report.wallSeconds = secondsSince(start);
  publish(renderMarkdown(report), renderJson(report), config.outPath, config.jsonPath);
  return 0;
}

int runShmMode(const ShmBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  ShmBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.results = runShmBenchmarks(config, std::cerr);
  report.wallSeconds = secondsSince(start);
  publish(renderShmMarkdown(report), renderShmJson(report), config.outPath, config.jsonPath);
  return 0;
}

int runRoundMode(const RoundBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  RoundBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.results = runRoundBenchmarks(config, std::cerr);
  report.wallSeconds = secondsSince(start);
  publish(renderRoundMarkdown(report), renderRoundJson(report), config.outPath, config.jsonPath);
  return 0;
}

int runSoakMode(const SoakBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  SoakBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.results = runSoakBenchmark(config, std::cerr);
  report.wallSeconds = secondsSince(start);
  publish(renderSoakMarkdown(report), renderSoakJson(report), config.outPath, config.jsonPath);
  return 0;
}

// wsync-mon next to this executable (an install), else the one of this build.
std::string monitorBinary() {
  const std::filesystem::path sibling = std::filesystem::canonical("/proc/self/exe").parent_path() / "wsync-mon";
  return std::filesystem::exists(sibling) ? sibling.string() : std::string(WSYNC_BENCH_MON);
}

int runMonitorMode(const RoundBenchConfig& config, std::size_t monitors) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  const MachineInfo machine = describeMachine(config.commit);
  const MonitorMeasurement result = runMonitorBenchmark(config, monitors, monitorBinary(), std::cerr);
  const double slowdown = result.with.p50Us / result.without.p50Us;
  std::ostringstream md;
  md << "# wsync-bench monitors\n\n";
  machineSection(md, machine);
  md << "\n## Round time with and without monitors\n\n"
     << "One bus: " << result.workers << " worker processes, " << result.model << ", rounds back to back in pause mode "
     << "keep (as `wsync-bench round`). " << result.roundsPerPhase << " rounds without monitors, " << result.roundsPerPhase
     << " with " << result.monitors << " `wsync-mon` processes in live-view mode (redrawn every 250 ms into "
     << "/dev/null, a snapshot a second each), " << result.roundsPerPhase << " without again; the two phases without "
     << "are reported together. Round: BeginUpdate sent to Commit handled, by the trainer.\n\n"
     << "| monitors | rounds | p50 ms | p90 ms | p99 ms |\n|---:|---:|---:|---:|---:|\n"
     << "| 0 | " << result.without.samples << " | " << fixed(result.without.p50Us / 1000, 3) << " | "
     << fixed(result.without.p90Us / 1000, 3) << " | " << fixed(result.without.p99Us / 1000, 3) << " |\n"
     << "| " << result.monitors << " | " << result.with.samples << " | " << fixed(result.with.p50Us / 1000, 3) << " | "
     << fixed(result.with.p90Us / 1000, 3) << " | " << fixed(result.with.p99Us / 1000, 3) << " |\n\n"
     << "p50 with / without: **" << ratio(slowdown) << "** (goal: under 2% apart, at most "
     << ratio(kMaxMonitorSlowdown) << "): " << verdict(slowdown <= kMaxMonitorSlowdown)
     << ". Other processes used " << static_cast<int>(result.othersCpuShare * 100) << "% of the CPUs; wall time "
     << fixed(secondsSince(start), 0) << " s.\n";
  std::ostringstream json;
  json << "{\"machine\": " << machineJson(machine) << ", \"model\": " << jsonString(result.model)
       << ", \"workers\": " << result.workers << ", \"monitors\": " << result.monitors
       << ", \"rounds_per_phase\": " << result.roundsPerPhase << ", \"without_p50_us\": " << result.without.p50Us
       << ", \"without_p99_us\": " << result.without.p99Us << ", \"with_p50_us\": " << result.with.p50Us
       << ", \"with_p99_us\": " << result.with.p99Us << ", \"p50_ratio\": " << slowdown << "}\n";
  publish(md.str(), json.str(), config.outPath, config.jsonPath);
  return 0;
}

#ifdef WSYNC_HAVE_CUDA
// The command line as typed, quoted where a shell would need it, for reports that say how they were made.
std::string commandLine(int argc, char** argv) {
  std::string line = "wsync-bench";
  for (int index = 1; index < argc; ++index) {
    const std::string arg = argv[index];
    const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_=.,:/+@%") == std::string::npos;
    if (plain) {
      line += " " + arg;
      continue;
    }
    line += " '";
    for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += "'";
  }
  return line;
}

int runGpuMode(const GpuBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  prepareGpuEnvironment();  // before anything loads NCCL or starts a rank
  GpuBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.gpus = describeGpus();
  report.results = runGpuBenchmarks(config, report.gpus, std::cerr);
  report.wallSeconds = secondsSince(start);
  publish(renderGpuMarkdown(report), renderGpuJson(report), config.outPath, config.jsonPath);
  return 0;
}
#endif

// Runs a mode; a failure is reported on stderr with the mode's name, an interruption as such.
template <typename Mode>
int reportingFailures(const char* name, Mode&& mode) {
  try {
    return mode();
  } catch (const std::exception& error) {
    if (interrupted()) {
      std::cerr << "wsync-bench " << name << ": interrupted; agents stopped, nothing written\n";
      return 130;  // the shell's convention for a run ended by Ctrl-C
    }
    std::cerr << "wsync-bench " << name << ": " << error.what() << '\n';
    return 1;
  }
}

void addAgentOptions(CLI::App& command, AgentOptions& options) {
  command.add_option("--parent", options.parent)->required();
  command.add_option("--id", options.id)->required();
  command.add_option("--bus-requests", options.busRequests)->required();
  command.add_option("--bus-events", options.busEvents)->required();
  command.add_option("--raw-requests", options.rawRequests)->required();
  command.add_option("--raw-events", options.rawEvents)->required();
}

}  // namespace
}  // namespace wsync::bench

int main(int argc, char** argv) {
  using namespace wsync::bench;
  CLI::App app{"wsync-bench: wsync measured against raw baselines, side by side in the same run"};
  app.require_subcommand(1);

  BusBenchConfig config;
  CLI::App& busMode = *app.add_subcommand(
      "bus", "Control-plane latency through the bus library vs raw ZeroMQ, and the shared-memory version read");
  auto* roundTrips = busMode
                         .add_option("--round-trips", config.roundTrips,
                                     "Measured request/reply round trips per path (bus, raw)")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  auto* iterations = busMode
                         .add_option("--iterations", config.pauseRounds,
                                     "Measured 'publish pause, collect N acks' rounds per path, for each N")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  busMode.add_option("--block", config.block, "Iterations per block; blocks alternate bus and raw")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  busMode.add_option("--agents", config.agentCounts, "Agent process counts N for the fan-out, e.g. 1,8,32")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, kMaxBenchAgents))
      ->capture_default_str();
  auto* versionReads = busMode
                           .add_option("--version-reads", config.versionReads,
                                       "Version reads per timed repetition")
                           ->check(CLI::PositiveNumber)
                           ->capture_default_str();
  busMode.add_flag("--quick", config.quick, "Few iterations, for a demonstration in a few seconds");
  busMode.add_option("--out", config.outPath, "Also write the markdown report to this file");
  busMode.add_option("--json", config.jsonPath, "Write the results as JSON to this file");
  busMode.add_option("--commit", config.commit, "Commit to name in the report (default: git describe)");

  ShmBenchConfig shmConfig;
  CLI::App& shmMode = *app.add_subcommand(
      "shm", "The shm payload channel, one sender process to 1, 3 and 8 receiver processes, vs memcpy");
  auto* models = shmMode.add_option("--models", shmConfig.models, "Models (names cli::modelTensors knows)")
                     ->delimiter(',')
                     ->capture_default_str();
  auto* fanout = shmMode.add_option("--fanout", shmConfig.fanoutReceivers, "Receiver counts of the fan-out")
                     ->delimiter(',')
                     ->check(CLI::Range(std::size_t{2}, std::size_t{64}))
                     ->capture_default_str();
  bool noFanout = false;
  shmMode.add_flag("--no-fanout", noFanout, "Only the one-receiver measurements")->excludes(fanout);
  shmMode.add_option("--bucket-mib", shmConfig.bucketMiB, "Bucket size in MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{4096}))
      ->capture_default_str();
  shmMode.add_option("--buffers", shmConfig.buffers, "Buffers in the arena's ring")
      ->check(CLI::Range(std::uint32_t{2}, std::uint32_t{8}))
      ->capture_default_str();
  auto* repetitions = shmMode.add_option("--repetitions", shmConfig.repetitions, "Timed repetitions per path")
                          ->check(CLI::PositiveNumber)
                          ->capture_default_str();
  shmMode.add_option("--sweep-buckets", shmConfig.sweepBucketMiB,
                     "Also measure one receiver with these bucket sizes in MiB (with --sweep-buffers)")
      ->delimiter(',')
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{4096}));
  shmMode.add_option("--sweep-buffers", shmConfig.sweepBuffers, "... and these buffer counts (with --sweep-buckets)")
      ->delimiter(',')
      ->check(CLI::Range(std::uint32_t{2}, std::uint32_t{8}));
  shmMode.add_option("--sweep-repetitions", shmConfig.sweepRepetitions, "Timed repetitions per sweep geometry")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  shmMode.add_flag("--quick", shmConfig.quick, "opt-125m only, 3 receivers at most, few repetitions: seconds");
  shmMode.add_flag("--wait-for-quiet", shmConfig.waitForQuiet,
                   "Start every round once the machine's CPUs were 90% idle for 0.5 s (shared machines)");
  shmMode.add_option("--out", shmConfig.outPath, "Also write the markdown report to this file");
  shmMode.add_option("--json", shmConfig.jsonPath, "Write the results as JSON to this file");
  shmMode.add_option("--commit", shmConfig.commit, "Commit to name in the report (default: git describe)");

  RoundBenchConfig monitorConfig;
  monitorConfig.workerCounts = {kRoundGoalWorkers};
  monitorConfig.models = {"synthetic:16:1"};
  monitorConfig.rounds = 200;
  std::size_t monitors = kDefaultMonitors;
  std::size_t monitorWorkers = kRoundGoalWorkers;
  std::string monitorModel = monitorConfig.models.front();
  CLI::App& monitorMode = *app.add_subcommand(
      "monitors", "Round times without and with N wsync-mon processes attached (goal: under 2% apart)");
  monitorMode.add_option("--monitors", monitors, "wsync-mon processes attached")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  monitorMode.add_option("--workers", monitorWorkers, "Worker processes")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, kMaxRoundWorkers));
  monitorMode.add_option("--model", monitorModel, "Manifest")->capture_default_str();
  monitorMode.add_option("--rounds", monitorConfig.rounds, "Measured rounds per phase (three phases)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  monitorMode.add_option("--warmup", monitorConfig.warmup, "Unmeasured rounds first")->capture_default_str();
  monitorMode.add_option("--out", monitorConfig.outPath, "Also write the markdown report to this file");
  monitorMode.add_option("--json", monitorConfig.jsonPath, "Write the results as JSON to this file");
  monitorMode.add_option("--commit", monitorConfig.commit, "Commit to name in the report (default: git describe)");

  RoundBenchConfig roundConfig;
  CLI::App& roundMode = *app.add_subcommand(
      "round", "An update round's control overhead (round time minus data time) for 1, 8 and 32 worker processes, "
               "and by number of tensors, vs the raw ZeroMQ round trip");
  roundMode.add_option("--workers", roundConfig.workerCounts, "Worker process counts, e.g. 1,8,32")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, kMaxRoundWorkers))
      ->capture_default_str();
  roundMode.add_option("--models", roundConfig.models, "Manifests of the worker sweep (names cli::modelTensors knows)")
      ->delimiter(',')
      ->capture_default_str();
  auto* countModels = roundMode
                          .add_option("--count-models", roundConfig.countModels,
                                      "Manifests of the tensor-count sweep: same bytes, different tensor counts")
                          ->delimiter(',')
                          ->capture_default_str();
  bool noCountSweep = false;
  roundMode.add_flag("--no-count-sweep", noCountSweep, "Only the worker sweep")->excludes(countModels);
  roundMode.add_option("--count-workers", roundConfig.countWorkers, "Worker processes of the tensor-count sweep")
      ->check(CLI::Range(std::size_t{1}, kMaxRoundWorkers))
      ->capture_default_str();
  auto* roundWarmup = roundMode.add_option("--warmup", roundConfig.warmup, "Unmeasured rounds before each measurement")
                          ->check(CLI::PositiveNumber)
                          ->capture_default_str();
  auto* roundRounds = roundMode.add_option("--rounds", roundConfig.rounds, "Measured rounds per worker count")
                          ->check(CLI::PositiveNumber)
                          ->capture_default_str();
  auto* countRounds = roundMode
                          .add_option("--count-rounds", roundConfig.countRounds,
                                      "Measured rounds per manifest of the tensor-count sweep")
                          ->check(CLI::PositiveNumber)
                          ->capture_default_str();
  auto* baselineRoundTrips = roundMode
                                 .add_option("--round-trips", roundConfig.baselineRoundTrips,
                                             "Baseline request/reply round trips per path, before and after")
                                 ->check(CLI::PositiveNumber)
                                 ->capture_default_str();
  roundMode.add_option("--bucket-kib", roundConfig.bucketKiB, "The coordinator's bucket size in KiB (a multiple of 4)")
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{4} << 20))
      ->capture_default_str();
  roundMode.add_flag("--quick", roundConfig.quick, "Few rounds, for a demonstration in about 15 seconds");
  roundMode.add_option("--out", roundConfig.outPath, "Also write the markdown report to this file");
  roundMode.add_option("--json", roundConfig.jsonPath, "Write the results as JSON to this file");
  roundMode.add_option("--commit", roundConfig.commit, "Commit to name in the report (default: git describe)");

  SoakBenchConfig soakConfig;
  CLI::App& soakMode = *app.add_subcommand(
      "soak", "Thousands of rounds back to back through the real wsync-coordinator and wsync-worker processes, with "
              "random worker restarts: rounds/s, round time, RSS and open fds over time (goal: flat)");
  auto* soakRounds = soakMode.add_option("--rounds", soakConfig.rounds, "Rounds in all (a multiple of --window)")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  soakMode.add_option("--workers", soakConfig.workers, "wsync-worker processes")
      ->check(CLI::Range(std::size_t{1}, kMaxRoundWorkers))
      ->capture_default_str();
  auto* soakWindow = soakMode
                         .add_option("--window", soakConfig.window,
                                     "Rounds per window of figures (the first is a warm-up; the second and the last "
                                     "run without restarts)")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  auto* soakRestartEvery = soakMode
                               .add_option("--restart-every", soakConfig.restartEvery,
                                           "Mean rounds between worker restarts (SIGKILL at a random moment, then "
                                           "the same id again); 0: none")
                               ->capture_default_str();
  soakMode.add_option("--seed", soakConfig.seed, "Seed of the restart schedule (rounds, victims, moments)")
      ->capture_default_str();
  soakMode.add_option("--model", soakConfig.model, "Manifest (names cli::modelTensors knows)")->capture_default_str();
  soakMode.add_option("--pause-mode", soakConfig.pauseMode, "The trainer's pause mode")
      ->check(CLI::IsMember({"abort", "wait", "keep"}))
      ->capture_default_str();
  soakMode.add_option("--step-ms", soakConfig.workerStepMs, "The workers' decode step (wsync-worker --step-ms)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000}))
      ->capture_default_str();
  soakMode.add_option("--bin-dir", soakConfig.binDir,
                      "Folder of wsync-coordinator and wsync-worker (default: beside wsync-bench, else this build's)");
  soakMode.add_option("--child-log", soakConfig.childLog,
                      "Write the coordinator's and workers' stderr to this file (default: this stderr)");
  soakMode.add_option("--child-log-level", soakConfig.childLogLevel, "--log-level of the coordinator and workers")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  soakMode.add_flag("--quick", soakConfig.quick, "600 rounds in windows of 100, a restart every ~25: seconds");
  soakMode.add_option("--out", soakConfig.outPath, "Also write the markdown report to this file");
  soakMode.add_option("--json", soakConfig.jsonPath, "Write the results as JSON to this file");
  soakMode.add_option("--commit", soakConfig.commit, "Commit to name in the report (default: git describe)");

#ifdef WSYNC_HAVE_CUDA
  GpuBenchConfig gpuConfig;
  CLI::App& gpuMode = *app.add_subcommand(
      "gpu", "The nccl and cuda_ipc channels between GPU processes, vs one raw ncclBroadcast / cudaMemcpy of the same "
             "bytes");
  auto* gpuChannels = gpuMode.add_option("--channel", gpuConfig.channels, "Channels to measure")
                          ->delimiter(',')
                          ->check(CLI::IsMember({"nccl", "cuda_ipc"}))
                          ->capture_default_str();
  auto* gpuModels = gpuMode
                        .add_option("--models", gpuConfig.models,
                                    "Models (names cli::modelTensors knows, e.g. synthetic:1000:512 for a quick run)")
                        ->delimiter(',')
                        ->capture_default_str();
  gpuMode
      .add_option("--receivers", gpuConfig.receivers,
                  "Receiver processes (default: nccl, one per other visible GPU; cuda_ipc, 1)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  gpuMode.add_option("--devices", gpuConfig.ipcDevices, "cuda_ipc: the sender's GPU and the receivers' GPU")
      ->delimiter(',')
      ->expected(2)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gpuMode
      .add_option("--bucket-mib", gpuConfig.bucketMiB,
                  "nccl bucket size in MiB; a list measures each (cuda_ipc plans with the first)")
      ->delimiter(',')
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{16384}))
      ->capture_default_str();
  auto* gpuWarmup = gpuMode.add_option("--warmup", gpuConfig.warmup, "Unmeasured rounds per measurement")
                        ->check(CLI::NonNegativeNumber)
                        ->capture_default_str();
  auto* gpuReps = gpuMode.add_option("--reps", gpuConfig.repetitions, "Timed rounds per path and measurement")
                      ->check(CLI::PositiveNumber)
                      ->capture_default_str();
  gpuMode
      .add_option("--allocation", gpuConfig.allocation,
                  "tensor: one cudaMalloc per tensor; torch: segments as PyTorch's caching allocator makes them")
      ->check(CLI::IsMember({"tensor", "torch"}))
      ->capture_default_str();
  bool noHostCheck = false;
  gpuMode.add_flag("--no-host-check", noHostCheck,
                   "Skip recomputing the first channel round's digest on the host (seconds for 61 GB)");
  gpuMode.add_flag("--quick", gpuConfig.quick, "qwen2.5-7b only, few rounds");
  gpuMode.add_option("--out", gpuConfig.outPath, "Also write the markdown report to this file");
  gpuMode.add_option("--json", gpuConfig.jsonPath, "Write the results as JSON to this file");
  gpuMode.add_option("--commit", gpuConfig.commit, "Commit to name in the report (default: git describe)");

  GpuRankOptions gpuRank;
  CLI::App& gpuRankAgent = *app.add_subcommand("agent-gpu-rank", "internal: GPU rank")->group("");
  gpuRankAgent.add_option("--parent", gpuRank.parent)->required();
  gpuRankAgent.add_option("--channel", gpuRank.channel)->required();
  gpuRankAgent.add_option("--rank", gpuRank.rank)->required();
  gpuRankAgent.add_option("--world", gpuRank.world)->required();
  gpuRankAgent.add_option("--device", gpuRank.device)->required();
  gpuRankAgent.add_option("--baseline-device", gpuRank.baselineDevice)->required();
  gpuRankAgent.add_option("--model", gpuRank.model)->required();
  gpuRankAgent.add_option("--allocation", gpuRank.allocation)->required();
  gpuRankAgent.add_option("--segment", gpuRank.segment);
#else
  // Listed, so that asking for it says why it is missing rather than "unknown subcommand".
  CLI::App& gpuMode =
      *app.add_subcommand("gpu", "The GPU channels against raw NCCL and cudaMemcpy (not in this build)");
  gpuMode.allow_extras();
#endif

  AgentOptions agent;
  // Hidden (empty group): started by `bus`, never by hand.
  CLI::App& roundTripAgent = *app.add_subcommand("agent-roundtrip", "internal: round-trip agent")->group("");
  addAgentOptions(roundTripAgent, agent);
  roundTripAgent.add_option("--iterations", agent.iterations)->required();
  roundTripAgent.add_option("--warmup", agent.warmup)->required();
  roundTripAgent.add_option("--block", agent.block)->required()->check(CLI::PositiveNumber);
  roundTripAgent.add_option("--samples", agent.samplesPath)->required();
  CLI::App& pauseAgent = *app.add_subcommand("agent-pause", "internal: fan-out agent")->group("");
  addAgentOptions(pauseAgent, agent);

  ShmReceiverOptions receiver;
  CLI::App& shmReceiver = *app.add_subcommand("agent-shm-receive", "internal: shm receiver")->group("");
  shmReceiver.add_option("--parent", receiver.parent)->required();
  shmReceiver.add_option("--arena", receiver.arena)->required();
  shmReceiver.add_option("--receiver", receiver.receiver)->required();
  shmReceiver.add_option("--model", receiver.model)->required();
  shmReceiver.add_option("--transfers", receiver.transfers)->required();

  RoundWorkerOptions roundWorker;
  CLI::App& roundWorkerAgent = *app.add_subcommand("agent-round-worker", "internal: round worker")->group("");
  roundWorkerAgent.add_option("--parent", roundWorker.parent)->required();
  roundWorkerAgent.add_option("--bus", roundWorker.bus)->required();
  roundWorkerAgent.add_option("--id", roundWorker.id)->required();
  roundWorkerAgent.add_option("--model", roundWorker.model)->required();

  CLI11_PARSE(app, argc, argv);
  // The coordinator and agents run in this process: a line per round would cost what is measured, and hide the
  // results. Warnings and errors still show.
  wsync::log::configure({.program = "wsync-bench", .level = spdlog::level::warn});

#ifdef WSYNC_HAVE_CUDA
  if (gpuRankAgent.parsed()) {
    std::signal(SIGINT, SIG_IGN);  // as for the other agents below
    return runGpuRank(gpuRank);
  }
  if (gpuMode.parsed()) {
    if (gpuConfig.quick) {
      if (gpuModels->count() == 0) gpuConfig.models = {"qwen2.5-7b"};
      if (gpuWarmup->count() == 0) gpuConfig.warmup = kQuickGpuWarmup;
      if (gpuReps->count() == 0) gpuConfig.repetitions = kQuickGpuRepetitions;
    }
    gpuConfig.channelsGiven = gpuChannels->count() > 0;
    gpuConfig.hostCheck = !noHostCheck;
    gpuConfig.commandLine = commandLine(argc, argv);
    return reportingFailures("gpu", [&] { return runGpuMode(gpuConfig); });
  }
#else
  if (gpuMode.parsed()) {
    std::cerr << "wsync-bench gpu: this build has no GPU channels (configure with -DWSYNC_CUDA=ON on a host with the "
                 "CUDA Toolkit and NCCL's header)\n";
    return 1;
  }
#endif

  if (roundTripAgent.parsed() || pauseAgent.parsed() || shmReceiver.parsed() || roundWorkerAgent.parsed()) {
    // Ctrl-C reaches the whole process group: agents leave stopping to the benchmark, which reports the
    // interruption instead of a dead agent.
    std::signal(SIGINT, SIG_IGN);
    if (shmReceiver.parsed()) return runShmReceiver(receiver);
    if (roundWorkerAgent.parsed()) return runRoundWorker(roundWorker);
    return roundTripAgent.parsed() ? runRoundTripAgent(agent) : runPauseAgent(agent);
  }

  if (shmMode.parsed()) {
    if (shmConfig.quick) {
      if (models->count() == 0) shmConfig.models = {"opt-125m"};
      if (fanout->count() == 0) shmConfig.fanoutReceivers = {3};
      if (repetitions->count() == 0) shmConfig.repetitions = kQuickShmRepetitions;
      shmConfig.sweepRepetitions = std::min(shmConfig.sweepRepetitions, kQuickShmRepetitions);
    }
    if (noFanout) shmConfig.fanoutReceivers.clear();
    return reportingFailures("shm", [&] { return runShmMode(shmConfig); });
  }

  if (monitorMode.parsed()) {
    monitorConfig.workerCounts = {monitorWorkers};
    monitorConfig.models = {monitorModel};
    return reportingFailures("monitors", [&] { return runMonitorMode(monitorConfig, monitors); });
  }

  if (soakMode.parsed()) {
    if (soakConfig.quick) {
      if (soakRounds->count() == 0) soakConfig.rounds = kQuickSoakRounds;
      if (soakWindow->count() == 0) soakConfig.window = kQuickSoakWindow;
      if (soakRestartEvery->count() == 0) soakConfig.restartEvery = kQuickSoakRestartEvery;
    }
    return reportingFailures("soak", [&] { return runSoakMode(soakConfig); });
  }

  if (roundMode.parsed()) {
    if (roundConfig.quick) {
      if (roundWarmup->count() == 0) roundConfig.warmup = kQuickRoundWarmup;
      if (roundRounds->count() == 0) roundConfig.rounds = kQuickRounds;
      if (countRounds->count() == 0) roundConfig.countRounds = kQuickCountRounds;
      if (baselineRoundTrips->count() == 0) roundConfig.baselineRoundTrips = kQuickBaselineRoundTrips;
    }
    if (noCountSweep) roundConfig.countModels.clear();
    return reportingFailures("round", [&] { return runRoundMode(roundConfig); });
  }

  if (config.quick) {
    if (roundTrips->count() == 0) config.roundTrips = kQuickRoundTrips;
    if (iterations->count() == 0) config.pauseRounds = kQuickPauseRounds;
    if (versionReads->count() == 0) config.versionReads = kQuickVersionReads;
    config.versionRepetitions = kQuickVersionRepetitions;
  }
  return reportingFailures("bus", [&] { return runBusMode(config); });
}
