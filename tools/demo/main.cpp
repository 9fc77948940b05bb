// wsync-demo: the quickstart. Starts a coordinator, one trainer and N workers as separate processes, runs R
// update rounds while the workers generate, prints each round live, and at the end verifies that every worker
// holds the trainer's bytes of the last version and that every output's version spans are consistent.
// Exit code 0 only when all of that holds.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <tl/expected.hpp>
#include <wsync/cli/child_process.hpp>

#include "round_reporter.hpp"
#include "verification.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/event_subscriber.hpp"
#include "wsync/cli/progress_bar.hpp"

namespace fs = std::filesystem;
using namespace wsync;

namespace {

// Start-up of a process on a loaded 2-core machine takes well under this.
constexpr std::chrono::seconds kStartTimeout{30};
// Longest the demo waits for the whole run; a 20-round opt-125m run takes seconds.
constexpr std::chrono::minutes kRunTimeout{10};
constexpr std::chrono::seconds kStopTimeout{30};
// A child that ignores SIGTERM this long when the demo gives up on it is killed.
constexpr std::chrono::seconds kTerminateGrace{5};

// A child of the demo, its stdout and stderr appended to `logPath`; stopped (SIGTERM, then SIGKILL) and reaped when
// the handle goes away, so that a failed demo leaves nothing running.
tl::expected<cli::ChildProcess, std::string> start(const std::string& path, const std::vector<std::string>& args,
                                                   const std::string& logPath) {
  const int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return tl::unexpected("cannot open " + logPath + ": " + std::strerror(errno));
  try {
    auto child = cli::ChildProcess::spawn(path, args, {.stdoutFd = log, .stderrFd = log, .stopGrace = kTerminateGrace});
    ::close(log);
    return child;
  } catch (const std::exception& error) {
    ::close(log);
    return tl::unexpected(std::string(error.what()));
  }
}

std::string siblingOrBuilt(const fs::path& self, const std::string& name, const char* built) {
  const fs::path sibling = self.parent_path() / name;
  return fs::exists(sibling) ? sibling.string() : std::string(built);
}

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The trainer's bytes sent so far in `round`, from its control-block slot (0 until it starts).
std::uint64_t trainerBytesSent(const bus::ControlBlockView& block, std::uint64_t round) {
  std::uint64_t bytes = 0;
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    const auto agent = block.agentSlot(slot);
    if (agent && agent->occupancy == bus::SlotOccupancy::Active && agent->agentAttached &&
        agent->role == msg::Role::Trainer && agent->transferRound == round) {
      bytes = std::max(bytes, agent->transferBytes);
    }
  }
  return bytes;
}

int fail(const std::string& what, const fs::path& workDir) {
  std::printf("\nDEMO FAILED: %s\n(logs in %s)\n", what.c_str(), workDir.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t workers = 3;
  std::uint32_t rounds = 20;
  std::string model = "opt-125m";
  std::string pauseMode = "keep";
  std::uint64_t bucketMiB = 4;
  std::uint64_t intervalMs = 50;
  std::string workDirOption;
  std::string channel = "shm";
  std::vector<int> cudaDevices{0};
  CLI::App app{"wsync-demo: coordinator + trainer + workers as processes, R rounds, verified"};
  app.add_option("--workers", workers, "worker processes")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "versions to publish")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--model", model, "opt-125m | tiny | synthetic:COUNT:MIB")->capture_default_str();
  app.add_option("--pause-mode", pauseMode, "abort | wait | keep")
      ->capture_default_str()
      ->check(CLI::IsMember({"abort", "wait", "keep"}));
  app.add_option("--bucket-mib", bucketMiB, "shm bucket size")->capture_default_str();
  app.add_option("--interval-ms", intervalMs, "trainer's pause between steps (workers generate meanwhile)")
      ->capture_default_str();
  app.add_option("--channel", channel, "shm | tcp (host memory) | nccl | cuda_ipc (the model on GPUs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "tcp", "nccl", "cuda_ipc"}));
  app.add_option("--cuda-devices", cudaDevices,
                 "GPUs for nccl and cuda_ipc: the trainer on the first, the workers round-robin on the others (on the "
                 "first too when it is the only one)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--work-dir", workDirOption, "where logs, outputs and dumps go (default: a new temporary folder)");
  CLI11_PARSE(app, argc, argv);
  if (cudaDevices.empty()) cudaDevices = {0};

  const fs::path self = fs::canonical("/proc/self/exe");
  const std::string coordinatorBin = siblingOrBuilt(self, "wsync-coordinator", WSYNC_DEMO_COORDINATOR);
  const std::string trainerBin = siblingOrBuilt(self, "wsync-trainer", WSYNC_DEMO_TRAINER);
  const std::string workerBin = siblingOrBuilt(self, "wsync-worker", WSYNC_DEMO_WORKER);

  fs::path workDir = workDirOption;
  if (workDir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "wsync-demo-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return fail("cannot create a temporary folder", pattern);
    workDir = pattern;
  }
  fs::create_directories(workDir);
  // A private runtime folder: the demo's sockets and locks never meet another bus.
  const fs::path runtimeDir = workDir / "run";
  fs::create_directories(runtimeDir);
  fs::permissions(runtimeDir, fs::perms::owner_all, fs::perm_options::replace);
  setenv("WSYNC_RUNTIME_DIR", runtimeDir.c_str(), 1);
  const std::string bus = "demo-" + std::to_string(getpid());
  signal(SIGPIPE, SIG_IGN);

  const bool onGpu = channel == "nccl" || channel == "cuda_ipc";
  // The trainer's GPU, then each worker's.
  auto workerDevice = [&](std::uint32_t index) {
    if (cudaDevices.size() == 1) return cudaDevices[0];
    return cudaDevices[1 + index % (cudaDevices.size() - 1)];
  };
  auto channelArgs = [&](int device) {
    return onGpu ? std::vector<std::string>{"--channel", channel, "--cuda-device", std::to_string(device)}
                 : std::vector<std::string>{"--channel", channel};
  };
  if (channel == "nccl") {
    // NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): say so before anything starts.
    std::set<int> used{cudaDevices[0]};
    for (std::uint32_t index = 0; index < workers; ++index) {
      if (!used.insert(workerDevice(index)).second) {
        return fail("--channel nccl needs a GPU of its own for the trainer and for each of the " +
                        std::to_string(workers) + " workers; --cuda-devices names " +
                        std::to_string(cudaDevices.size()) + " (or use --channel cuda_ipc, which shares GPUs)",
                    workDir);
      }
    }
  }
  std::printf(
      "wsync demo: 1 coordinator, 1 trainer, %u workers on bus '%s'; %u rounds of %s in pause mode '%s' over "
      "the %s channel\n",
      workers, bus.c_str(), rounds, model.c_str(), pauseMode.c_str(), channel.c_str());
  if (onGpu) {
    std::printf("            trainer on GPU %d; workers on GPU", cudaDevices[0]);
    for (std::uint32_t index = 0; index < workers; ++index) std::printf("%s %d", index ? "," : "", workerDevice(index));
    std::printf("\n");
  }
  std::printf("            logs, outputs and weight dumps in %s\n\n", workDir.c_str());
  std::fflush(stdout);

  auto coordinator = start(coordinatorBin, {"--bus", bus, "--bucket-mib", std::to_string(bucketMiB)},
                           (workDir / "coordinator.log").string());
  if (!coordinator) return fail(coordinator.error(), workDir);
  if (!waitFor([&] { return bus::ControlBlockView::open(bus).has_value(); }, kStartTimeout)) {
    return fail("the coordinator did not come up (see coordinator.log)", workDir);
  }
  auto block = bus::ControlBlockView::open(bus);
  auto endpoints = bus::resolveEndpoints(bus);
  zmq::context_t context(1);
  // Subscribed before anyone else starts, so that no round event is missed.
  auto events = bus::EventSubscriber::connect(context, endpoints->events, {""});
  if (!events) return fail(events.error().describe(), workDir);
  // PUB/SUB drops what is published before the subscription reaches the publisher; the first event received (the
  // coordinator beats every heartbeat interval) proves it has.
  if (!waitFor(
          [&] {
            auto received = events->receive(std::chrono::milliseconds(50));
            return received && received->has_value();
          },
          kStartTimeout)) {
    return fail("no event from the coordinator (see coordinator.log)", workDir);
  }

  std::vector<cli::ChildProcess> workerProcesses;
  for (std::uint32_t index = 0; index < workers; ++index) {
    const std::string id = "worker-" + std::to_string(index);
    std::vector<std::string> args{"--bus",         bus,
                                  "--id",          id,
                                  "--model",       model,
                                  "--outputs",     (workDir / (id + ".jsonl")).string(),
                                  "--dump",        (workDir / (id + ".safetensors")).string(),
                                  "--concurrency", "4",
                                  "--tokens",      "48",
                                  "--step-ms",     "2"};
    for (auto& arg : channelArgs(workerDevice(index))) args.push_back(std::move(arg));
    auto worker = start(workerBin, args, (workDir / (id + ".log")).string());
    if (!worker) return fail(worker.error(), workDir);
    workerProcesses.push_back(std::move(*worker));
  }
  if (!waitFor([&] { return block->activeAgents() >= workers; }, kStartTimeout)) {
    return fail("not every worker registered (see worker-*.log)", workDir);
  }
  std::printf("%u workers registered and generating; the trainer starts publishing\n\n", workers);
  std::fflush(stdout);

  std::vector<std::string> trainerArgs{"--bus",         bus,
                                       "--id",          "trainer-0",
                                       "--model",       model,
                                       "--steps",       std::to_string(rounds),
                                       "--interval-ms", std::to_string(intervalMs),
                                       "--pause-mode",  pauseMode,
                                       "--dump",        (workDir / "trainer.safetensors").string()};
  for (auto& arg : channelArgs(cudaDevices[0])) trainerArgs.push_back(std::move(arg));
  auto trainer = start(trainerBin, trainerArgs, (workDir / "trainer.log").string());
  if (!trainer) return fail(trainer.error(), workDir);

  demo::RoundReporter reporter;
  std::set<std::uint64_t> committed;
  std::uint32_t aborted = 0;
  std::optional<int> trainerStatus;
  const auto runDeadline = std::chrono::steady_clock::now() + kRunTimeout;
  // A bar under the round lines while a long payload moves (on a terminal only; cli::kProgressBarDelay).
  std::optional<cli::ProgressBar> bar;
  // Live progress, until the trainer is done and its last round reported.
  while (std::chrono::steady_clock::now() < runDeadline) {
    auto received = events->receive(std::chrono::milliseconds(100));
    if (const auto& transfer = reporter.transfer()) {
      const auto now = std::chrono::steady_clock::now();
      if (!bar)
        bar.emplace("round " + std::to_string(transfer->round) + "  version " + std::to_string(transfer->version), now);
      bar->update(trainerBytesSent(*block, transfer->round), transfer->totalBytes, now);
    }
    if (received && *received && (*received)->message) {
      const auto report = reporter.onEvent((*received)->source, *(*received)->message);
      if (!reporter.transfer()) bar.reset();
      if (report) {
        std::printf("%s\n", demo::formatReport(*report).c_str());
        std::fflush(stdout);
        if (report->committed)
          committed.insert(report->version);
        else
          ++aborted;
      }
      // Round and agent events come in bursts: drain them before looking at the trainer. Beats come steadily.
      if (!(*received)->source.starts_with(bus::topics::kBus)) continue;
    }
    if (!trainerStatus) trainerStatus = trainer->wait(std::chrono::milliseconds{0});
    if (trainerStatus) break;
    for (auto& worker : workerProcesses) {
      if (!worker.running()) return fail("a worker exited during the run (see worker-*.log)", workDir);
    }
  }
  if (!trainerStatus) return fail("the run did not finish in time", workDir);
  if (*trainerStatus != 0) return fail("the trainer exited with status " + std::to_string(*trainerStatus), workDir);

  // Workers write their outputs and dump their weights when asked to stop.
  for (auto& worker : workerProcesses) worker.signal(SIGTERM);
  for (std::size_t index = 0; index < workerProcesses.size(); ++index) {
    const auto status = workerProcesses[index].wait(kStopTimeout);
    if (status != 0) return fail("worker-" + std::to_string(index) + " did not stop cleanly", workDir);
  }
  coordinator->signal(SIGTERM);
  coordinator->wait(kStopTimeout);

  std::printf("\nverification\n");
  const std::uint64_t last = committed.empty() ? 0 : *committed.rbegin();
  std::printf("  %zu rounds committed, %u aborted; last version %llu\n", committed.size(), aborted,
              static_cast<unsigned long long>(last));
  if (committed.size() != rounds) return fail("expected " + std::to_string(rounds) + " committed rounds", workDir);
  std::uint64_t outputs = 0, straddling = 0, tokens = 0;
  for (std::uint32_t index = 0; index < workers; ++index) {
    const std::string id = "worker-" + std::to_string(index);
    auto version =
        demo::compareWeights((workDir / "trainer.safetensors").string(), (workDir / (id + ".safetensors")).string());
    if (!version) return fail(id + ": " + version.error(), workDir);
    if (*version != last) return fail(id + " holds version " + std::to_string(*version), workDir);
    auto summary = demo::checkOutputs((workDir / (id + ".jsonl")).string(), committed);
    if (!summary) return fail(id + ": " + summary.error(), workDir);
    std::printf(
        "  %s: holds version %llu, byte for byte the trainer's; %llu outputs (%llu tokens) with consistent "
        "spans, %llu of them straddle versions\n",
        id.c_str(), static_cast<unsigned long long>(*version), static_cast<unsigned long long>(summary->outputs),
        static_cast<unsigned long long>(summary->tokens), static_cast<unsigned long long>(summary->straddling));
    outputs += summary->outputs;
    straddling += summary->straddling;
    tokens += summary->tokens;
  }
  if (outputs == 0) return fail("the workers produced no outputs", workDir);
  std::printf(
      "\nDEMO PASSED: %u workers hold version %llu exactly as the trainer sent it; %llu outputs, %llu tokens, "
      "every span consistent (%llu outputs carry tokens of two or more versions)\n",
      workers, static_cast<unsigned long long>(last), static_cast<unsigned long long>(outputs),
      static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(straddling));
  return 0;
}
