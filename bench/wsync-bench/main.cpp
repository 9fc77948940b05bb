// wsync-bench bus|shm|tcp|round|soak|gpu [--quick] [--out FILE] [--json FILE] [--commit SHA] [options of the mode]
// (README.md). The hidden agent-* subcommands are the agent processes the modes start, options as one JSON argument.
#include <algorithm>
#include <csignal>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "bus.hpp"
#include "round.hpp"
#include "shm.hpp"
#include "soak.hpp"
#include "tcp.hpp"
#include "wsync/bus/core/log.hpp"
#ifdef WSYNC_HAVE_CUDA
#include "gpu.hpp"
#include "regions.hpp"
#include "shm_regions.hpp"
#endif

namespace wsync::bench {
namespace {

// A mode with the common options. --quick sets the mode's quick values before parsing, so that given options win.
template <typename Config>
CLI::App& addMode(CLI::App& app, const std::string& name, const std::string& description, Config& config, bool quick,
                  int& status, std::function<void(Report&)> measure) {
  if (quick) config.quick();
  CLI::App& mode = *app.add_subcommand(name, description);
  mode.add_flag("--quick", config.mode.quick, "A demonstration in seconds: too few samples for conclusions");
  mode.add_option("--out", config.mode.outPath, "Also write the markdown report to this file");
  mode.add_option("--json", config.mode.jsonPath, "Write the results as JSON to this file");
  mode.add_option("--commit", config.mode.commit, "Commit to name in the report (default: git describe)");
  mode.callback([&status, name, &options = config.mode, measure] { status = runMode(name, options, measure); });
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

// The region benchmarks' layouts (region_layouts.hpp): which models, how many sources, which receivers.
template <typename Config>
void regionLayoutOptions(CLI::App& mode, Config& config) {
  list(mode, "--models", config.models, "Models (cli::modelTensors)");
  list(mode, "--sources", config.sources, "Source counts M")->check(CLI::Range(std::uint32_t{1}, std::uint32_t{64}));
  list(mode, "--layouts", config.layouts, "Receivers: whole (1, every tensor whole), tp2 (2 TP halves)")
      ->check(CLI::IsMember({"whole", "tp2"}));
}

// An agent: hidden, started by a mode. Ctrl-C reaches the whole process group: agents leave stopping to the benchmark,
// which reports the interruption instead of a dead agent. A failure goes to stderr; the benchmark sees the agent exit.
template <typename Options>
void addAgent(CLI::App& app, const std::string& name, int& status, int (*run)(const Options&)) {
  CLI::App& agent = *app.add_subcommand(name, "internal")->group("");
  auto options = std::make_shared<std::string>();
  agent.add_option("options", *options, "JSON")->required();
  agent.callback([&status, name, run, options] {
    std::signal(SIGINT, SIG_IGN);
    try {
      status = run(nlohmann::json::parse(*options).get<Options>());
    } catch (const std::exception& error) {
      std::cerr << "wsync-bench " << name << " " << *options << ": " << error.what() << '\n';
      status = 2;
    }
  });
}

}  // namespace
}  // namespace wsync::bench

int main(int argc, char** argv) {
  using namespace wsync::bench;
  // The coordinator and agents may run in this process: a line per round would cost what is measured.
  wsync::log::configure({.program = "wsync-bench", .level = spdlog::level::warn});
  CLI::App app{"wsync-bench: wsync measured against raw baselines, side by side in the same run"};
  app.require_subcommand(1);
  int status = 0;
  const bool quick = std::any_of(argv + 1, argv + argc, [](const char* arg) { return std::string(arg) == "--quick"; });
  const auto positive = CLI::PositiveNumber;

  BusBenchConfig bus;
  CLI::App& busMode = addMode(app, "bus", "Control-plane latency, bus library vs raw ZeroMQ; version read", bus, quick,
                              status, [&](Report& report) { runBusBenchmark(bus, report); });
  option(busMode, "--round-trips", bus.roundTrips, "Measured round trips per path")->check(positive);
  option(busMode, "--iterations", bus.pauseRounds, "Pause rounds per path, each N")->check(positive);
  option(busMode, "--block", bus.block, "Iterations per block; blocks alternate bus and raw")->check(positive);
  list(busMode, "--agents", bus.agentCounts, "Agent process counts N for the fan-out")
      ->check(CLI::Range(std::size_t{1}, kMaxBenchAgents));
  option(busMode, "--version-reads", bus.versionReads, "Version reads per repetition")->check(positive);
  // Across hosts (README, "`bus` across hosts"; bench/wsync-bench/across_hosts.sh runs it on a rig of hosts).
  auto* transport = option(busMode, "--transport", bus.network.transport,
                           "ipc, or tcp://ADDRESS:PORT: bind there (ports PORT to PORT+5), agents connect there")
                        ->check([](const std::string& value) -> std::string {
                          return value == "ipc" || value.starts_with("tcp://") ? "" : "use ipc or tcp://ADDRESS:PORT";
                        });
  busMode
      .add_flag("--curve", bus.network.curve,
                "CURVE on the bus and raw paths (throwaway keys); raw over plain tcp measured beside them")
      ->needs(transport);
  auto* agentHosts =
      list(busMode, "--agent-hosts", bus.network.agentHosts, "Hosts the agents run on, round-robin (needs --spawn-via)")
          ->needs(transport);
  busMode
      .add_option("--spawn-via", bus.network.spawnVia,
                  "Launcher that runs a program on a host and execs it there, words separated by spaces, "
                  "{host} for the host: 'tests/hosts/rig.sh exec RIG {host} --'")
      ->needs(agentHosts);
  agentHosts->needs("--spawn-via");
  busMode.add_option("--link", bus.network.link, "What joins the hosts, for the report")->needs(transport);

  ShmBenchConfig shm;
  CLI::App& shmMode = addMode(app, "shm", "The shm channel to 1, 3 and 8 receiver processes vs memcpy", shm, quick,
                              status, [&](Report& report) { runShmBenchmark(shm, report); });
  list(shmMode, "--models", shm.models, "Models (names cli::modelTensors knows)");
  auto* fanout = list(shmMode, "--fanout", shm.fanoutReceivers, "Receiver counts of the fan-out")
                     ->check(CLI::Range(std::size_t{2}, std::size_t{64}));
  shmMode
      .add_flag_callback(
          "--no-fanout", [&shm] { shm.fanoutReceivers.clear(); }, "Only the one-receiver measurements")
      ->excludes(fanout);
  list(shmMode, "--bucket-mib", shm.bucketMiB, "Bucket sizes (MiB); the fan-out takes the first")
      ->check(CLI::Range(1, 4096));
  list(shmMode, "--buffers", shm.buffers, "Buffer counts of the arena's ring, likewise")->check(CLI::Range(2, 8));
  option(shmMode, "--repetitions", shm.repetitions, "Timed repetitions per path")->check(positive);
  shmMode.add_flag("--wait-for-quiet", shm.waitForQuiet, "Start every round once the CPUs were 90% idle for 0.5 s");

  TcpBenchConfig tcp;
  CLI::App& tcpMode = addMode(app, "tcp", "The tcp channel over loopback vs raw TCP send/recv", tcp, quick, status,
                              [&](Report& report) { runTcpBenchmark(tcp, report); });
  list(tcpMode, "--models", tcp.models, "Models (names cli::modelTensors knows)");
  list(tcpMode, "--receivers", tcp.receivers, "Receiver counts")->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  option(tcpMode, "--repetitions", tcp.repetitions, "Timed repetitions per path")->check(positive);

  RoundBenchConfig round;
  CLI::App& roundMode = addMode(app, "round",
                                "An update round's control overhead by workers and tensors, vs the raw "
                                "ZeroMQ round trip; with --monitors, with wsync-mon attached",
                                round, quick, status, [&](Report& report) { runRoundBenchmark(round, report); });
  const auto workerRange = CLI::Range(std::size_t{1}, kMaxRoundWorkers);
  list(roundMode, "--workers", round.workerCounts, "Worker process counts")->check(workerRange);
  list(roundMode, "--models", round.models, "Manifests of the worker sweep (cli::modelTensors)");
  auto* countModels = list(roundMode, "--count-models", round.countModels, "Manifests of the tensor-count sweep");
  roundMode
      .add_flag_callback(
          "--no-count-sweep", [&round] { round.countModels.clear(); }, "Only the worker sweep")
      ->excludes(countModels);
  option(roundMode, "--count-workers", round.countWorkers, "Workers of the tensor-count sweep")->check(workerRange);
  option(roundMode, "--warmup", round.warmup, "Unmeasured rounds first")->check(positive);
  option(roundMode, "--rounds", round.rounds, "Measured rounds per worker count")->check(positive);
  option(roundMode, "--count-rounds", round.countRounds, "Rounds per count manifest")->check(positive);
  option(roundMode, "--round-trips", round.baselineRoundTrips, "Baseline round trips per path")->check(positive);
  option(roundMode, "--bucket-kib", round.bucketKiB, "The coordinator's bucket size in KiB (a multiple of 4)")
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{4} << 20));
  option(roundMode, "--monitors", round.monitors, "wsync-mon processes attached for --rounds more rounds")
      ->check(CLI::Range(std::size_t{0}, kMaxMonitors));

  SoakBenchConfig soak;
  CLI::App& soakMode = addMode(app, "soak",
                               "Thousands of rounds through the real programs with random worker "
                               "restarts: does anything grow?",
                               soak, quick, status, [&](Report& report) { runSoakBenchmark(soak, report); });
  option(soakMode, "--rounds", soak.rounds, "Rounds (a multiple of --window)")->check(positive);
  option(soakMode, "--workers", soak.workers, "wsync-worker processes")->check(workerRange);
  option(soakMode, "--window", soak.window, "Rounds per window of figures")->check(positive);
  option(soakMode, "--restart-every", soak.restartEvery, "Mean rounds between restarts; 0: none");
  option(soakMode, "--seed", soak.seed, "Seed of the restart schedule");
  option(soakMode, "--model", soak.model, "Manifest (cli::modelTensors)");
  option(soakMode, "--pause-mode", soak.pauseMode, "The trainer's pause mode")
      ->check(CLI::IsMember({"abort", "wait", "keep"}));
  option(soakMode, "--step-ms", soak.workerStepMs, "The workers' decode step (wsync-worker --step-ms)")
      ->check(CLI::Range(0, 1000));
  soakMode.add_option("--bin-dir", soak.binDir, "Folder of wsync-coordinator and wsync-worker");
  option(soakMode, "--child-log-level", soak.childLogLevel, "--log-level of the coordinator and workers")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  ShmRegionBenchConfig shmRegions;
  CLI::App& shmRegionsMode =
      addMode(app, "shm-regions", "Region rounds over shm (M sharded sources) vs memcpy of what each receiver receives",
              shmRegions, quick, status, [&](Report& report) { runShmRegionBenchmark(shmRegions, report); });
  regionLayoutOptions(shmRegionsMode, shmRegions);
  option(shmRegionsMode, "--bucket-mib", shmRegions.bucketMiB, "Bucket of each source's ring")->check(positive);
  option(shmRegionsMode, "--buffers", shmRegions.buffers, "Buckets per ring")->check(CLI::Range(2, 8));
  option(shmRegionsMode, "--warmup", shmRegions.warmup, "Rounds before the measured ones");
  option(shmRegionsMode, "--reps", shmRegions.reps, "Measured rounds")->check(positive);

#ifdef WSYNC_HAVE_CUDA
  RegionBenchConfig regions;
  CLI::App& regionsMode =
      addMode(app, "regions", "Region rounds over cuda_ipc (M sharded sources) vs a device copy of what each receives",
              regions, quick, status, [&](Report& report) { runRegionBenchmark(regions, report); });
  regionLayoutOptions(regionsMode, regions);
  option(regionsMode, "--warmup", regions.warmup, "Rounds before the measured ones");
  option(regionsMode, "--reps", regions.reps, "Measured rounds")->check(CLI::Range(std::size_t{1}, std::size_t{60}));
  option(regionsMode, "--device", regions.device, "The GPU of every process");
  option(regionsMode, "--source-allocation", regions.sourceAllocation,
         "one: a source's buffers back to back in one cudaMalloc; tensor: a cudaMalloc each")
      ->check(CLI::IsMember({"one", "tensor"}));
  option(regionsMode, "--receiver-allocation", regions.receiverAllocation,
         "one: a receiver's local tensors back to back in one cudaMalloc; tensor: a cudaMalloc each")
      ->check(CLI::IsMember({"one", "tensor"}));

  GpuBenchConfig gpu;
  CLI::App& gpuMode = addMode(app, "gpu", "The nccl and cuda_ipc channels vs raw ncclBroadcast / cudaMemcpy", gpu,
                              quick, status, [&](Report& report) { runGpuBenchmark(gpu, report); });
  auto* channels =
      list(gpuMode, "--channel", gpu.channels, "Channels to measure")->check(CLI::IsMember({"nccl", "cuda_ipc"}));
  gpuMode.parse_complete_callback([&gpu, channels] { gpu.channelsGiven = channels->count() > 0; });
  list(gpuMode, "--models", gpu.models, "Models (cli::modelTensors)");
  gpuMode.add_option("--receivers", gpu.receivers, "Receivers (default: nccl, every other GPU; cuda_ipc, 1)")
      ->check(CLI::Range(1, 64));
  list(gpuMode, "--devices", gpu.ipcDevices, "cuda_ipc: sender GPU,receiver GPU")
      ->expected(2)
      ->check(CLI::NonNegativeNumber);
  list(gpuMode, "--bucket-mib", gpu.bucketMiB, "Bucket sizes in MiB (cuda_ipc: the first)")
      ->check(CLI::Range(1, 16384));
  option(gpuMode, "--warmup", gpu.warmup, "Unmeasured rounds per measurement")->check(CLI::NonNegativeNumber);
  option(gpuMode, "--reps", gpu.repetitions, "Timed rounds per path and measurement")->check(positive);
  option(gpuMode, "--allocation", gpu.allocation, "tensor: a cudaMalloc each; torch: PyTorch's caching segments")
      ->check(CLI::IsMember({"tensor", "torch"}));
  gpuMode.add_flag("--allocations-kept", gpu.allocationsKept,
                   "The sender vouches that no allocation was freed between rounds (as the Python package does when "
                   "PyTorch freed nothing): cuda_ipc skips its per-allocation check of the export each round");
  gpuMode.add_flag("--layout-kept", gpu.layoutKept,
                   "Every rank vouches that its span array is the last round's (as the Python trainer's "
                   "publish(version) does): the channels skip reading it to check their cached layout each round");
  option(gpuMode, "--nccl-first-slice-mib", gpu.ncclFirstSliceMiB,
         "nccl: size of a transfer's first and last broadcasts, which ramp up to and down from the largest "
         "(0: no ramp)");
  option(gpuMode, "--nccl-buffers", gpu.ncclBuffers, "nccl: staging buffers the packed broadcasts take in turn")
      ->check(CLI::Range(2, 8));
  option(gpuMode, "--nccl-max-slice-mib", gpu.ncclMaxSliceMiB,
         "nccl: the largest broadcast, and so each staging buffer's size (0: half a bucket; the bucket size: whole "
         "buckets, as protocol 4 did)");
  option(gpuMode, "--nccl-copy-blocks", gpu.ncclCopyBlocks,
         "nccl: kernel blocks of the pack/unpack copies that run beside the broadcasts")
      ->check(CLI::Range(1, 4096));
  option(gpuMode, "--nccl-ramp-copy-blocks", gpu.ncclRampCopyBlocks,
         "nccl: ... of those beside a smaller broadcast than themselves (the ramps: twice the bytes in the same time)")
      ->check(CLI::Range(1, 4096));
  option(gpuMode, "--nccl-max-ctas", gpu.ncclMaxCtas,
         "nccl: the channel communicator's ncclConfig maxCTAs (NCCL's buffers are per channel: fewer, less memory); "
         "0: NCCL's choice; the raw broadcast keeps NCCL's choice")
      ->check(CLI::Range(0, 64));
  option(gpuMode, "--nccl-poll-us", gpu.ncclPollMicroseconds,
         "nccl: how often a rank's transfer looks at its events (microseconds); 0: yield between looks")
      ->check(CLI::Range(0, 10000));
  option(gpuMode, "--nccl-enqueue", gpu.ncclEnqueue,
         "nccl: how broadcasts reach NCCL: child (the default: a blocking child of the joined communicator, its "
         "calls guarded) or nonblocking (the joined non-blocking communicator)")
      ->check(CLI::IsMember({"child", "nonblocking"}));

  option(gpuMode, "--ipc-spin-us", gpu.ipcSpinMicroseconds,
         "cuda_ipc: how long each side yields in a loop before it sleeps on the segment's futex (microseconds)")
      ->check(CLI::Range(0, 1000000));
  gpuMode.add_flag("--timeline", gpu.timeline,
                   "Profiling. nccl: CUDA timing events around every broadcast and copy on every rank, summarised "
                   "per rank beside the raw broadcast's own time there (four event records more per slice); "
                   "cuda_ipc: each round's stages and hand-offs between sender and receivers, and the copy kernel's "
                   "GPU time");
  gpuMode.add_flag("--nccl-network", gpu.ncclNetwork,
                   "nccl through NCCL's network transport (sockets; P2P and SHM off; each rank its own NCCL host), "
                   "both the channel and the raw baseline: the stand-in for nodes; ranks may then share a GPU");
  addAgent(app, "agent-gpu-rank", status, &runGpuRank);
#else
  // Listed, so that asking for it says why it is missing rather than "unknown subcommand".
  app.add_subcommand("gpu", "The GPU channels (not in this build)")->allow_extras()->callback([&status] {
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
