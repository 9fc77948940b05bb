#include "gpu_peers.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "round_fixture.hpp"
#include "test_environment.hpp"
#include "text_file.hpp"
#include "wsync/bus/channel/device_checksum.hpp"
#include "wsync/bus/channel/gpu/gpu_runtime.hpp"

namespace wsync::test {
namespace {

// How often eventually() looks again.
constexpr std::chrono::milliseconds kPollInterval{5};

// ChildProcess gives a child this process's stdout. Pointing fd 1 at a file of the peer's own for the duration of
// the spawn gives each peer its own stdout, read back whenever the test likes, with no pipe to keep drained.
GpuPeer startPeer(const std::string& name, const std::vector<std::string>& args) {
  static std::atomic<int> peers{0};
  const std::string path = useTemporaryRuntimeDirectory() + "/gpu-peer-" + std::to_string(peers++) + ".out";
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (file < 0) throw std::runtime_error("cannot create " + path);
  std::fflush(stdout);
  const int saved = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
  ::dup2(file, STDOUT_FILENO);  // the duplicate has no close-on-exec flag: the child inherits it as its stdout
  ::close(file);
  std::optional<ChildProcess> child;
  std::exception_ptr error;
  try {
    // Moved with the other programs by WSYNC_TEST_BIN_DIR (a build run on a GPU host it was not made on).
    child.emplace(ChildProcess::spawn(testBinary(WSYNC_GPU_PEER), args));
  } catch (...) {
    error = std::current_exception();
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  if (error) std::rethrow_exception(error);
  return GpuPeer{std::move(*child), name, path};
}

// What gpu_peer and NCCL need in every process: set here, inherited by every peer started after.
void useNcclEnvironment() {
  // NVLink SHARP multicast stays off on the lent machines (their KINDS.md); harmless elsewhere.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
}

void append(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

}  // namespace

int visibleGpus() { return bus::gpu::visibleDeviceCount(); }

std::optional<std::string> missingGpus(int devices) {
  const int visible = visibleGpus();
  if (visible == 0) return "no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)";
  if (visible < devices) {
    return "needs " + std::to_string(devices) + " GPUs, " + std::to_string(visible) + " visible";
  }
  return std::nullopt;
}

std::optional<std::string> missingNcclGpus(int devices) {
  if (auto missing = missingGpus(std::max(devices, 2))) {
    return *missing + " (NCCL refuses two ranks on one GPU, so the nccl channel needs at least 2)";
  }
  if (auto version = bus::gpu::ncclVersion(); !version) {
    return "NCCL cannot be loaded: " + version.error().describe();
  }
  return std::nullopt;
}

const std::string& RoundReport::text(const std::string& key) const {
  const auto found = fields.find(key);
  if (found == fields.end()) throw std::runtime_error("no " + key + "= in '" + line + "'");
  return found->second;
}

std::uint64_t RoundReport::number(const std::string& key) const { return std::stoull(text(key)); }

std::vector<RoundReport> GpuPeer::rounds() const {
  std::vector<RoundReport> reports;
  std::istringstream lines(readTextFile(outputPath));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    RoundReport report;
    std::string outcome;
    if (!(words >> first) || first != gpu_peer::kRoundWord) continue;
    if (!(words >> report.round >> outcome)) throw std::runtime_error(name + ": unexpected line '" + line + "'");
    report.ok = outcome == gpu_peer::kOkWord;
    for (std::string word; words >> word;) {
      if (const std::size_t equals = word.find('='); equals != std::string::npos) {
        report.fields.emplace(word.substr(0, equals), word.substr(equals + 1));
      }
    }
    report.line = line;
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string GpuPeer::output() const { return name + " printed:\n" + readTextFile(outputPath); }

std::vector<GpuPeer*> PeerGroup::all() {
  std::vector<GpuPeer*> peers{&sender};
  for (GpuPeer& receiver : receivers) peers.push_back(&receiver);
  return peers;
}

PeerGroup startGroup(const GroupOptions& options) {
  static std::atomic<int> groups{0};
  useNcclEnvironment();
  const std::string pidsFile = useTemporaryRuntimeDirectory() + "/gpu-group-" + std::to_string(groups++) + ".pids";
  const auto receiverCount = static_cast<std::uint32_t>(options.receiverDevices.size());
  std::vector<std::string> common{"--channel",
                                  options.channel,
                                  options.channel == "nccl" ? "--unique-id" : "--segment",
                                  options.endpoint,
                                  "--receivers",
                                  std::to_string(receiverCount),
                                  "--model",
                                  options.model,
                                  "--bucket-bytes",
                                  std::to_string(options.bucketBytes),
                                  "--rounds",
                                  std::to_string(options.rounds),
                                  "--seed",
                                  std::to_string(options.seed),
                                  "--peer-pids",
                                  std::to_string(::getpid()),
                                  "--peer-pids-file",
                                  pidsFile};
  append(common, options.everyPeerArgs);

  std::vector<GpuPeer> receivers;
  receivers.reserve(receiverCount);
  for (std::uint32_t index = 0; index < receiverCount; ++index) {
    std::vector<std::string> args = common;
    append(args, {"--role", "receive", "--receiver", std::to_string(index), "--device",
                  std::to_string(options.receiverDevices[index])});
    if (const auto more = options.receiverArgs.find(index); more != options.receiverArgs.end()) {
      append(args, more->second);
    }
    receivers.push_back(startPeer("receiver " + std::to_string(index), args));
  }
  std::vector<std::string> args = common;
  append(args, {"--role", "send", "--device", std::to_string(options.senderDevice)});
  append(args, options.senderArgs);
  PeerGroup group{startPeer("sender", args), std::move(receivers)};

  // Written whole, then renamed into place: a peer reads it complete or not at all.
  {
    std::ofstream out(pidsFile + ".tmp");
    for (GpuPeer* peer : group.all()) out << peer->process.pid() << '\n';
  }
  if (std::rename((pidsFile + ".tmp").c_str(), pidsFile.c_str()) != 0) {
    throw std::runtime_error("cannot write " + pidsFile);
  }
  return group;
}

std::string ncclUniqueIdHex() {
  useNcclEnvironment();
  auto id = bus::gpu::makeNcclUniqueId();
  if (!id) throw std::runtime_error("makeNcclUniqueId: " + id.error().describe());
  return bus::gpu::toHex(*id);
}

std::unique_ptr<bus::gpu::CudaIpcSegment> createIpcSegment() {
  auto segment = bus::gpu::CudaIpcSegment::create("wsync-test-ipc-" + uniqueBusName("g"), bus::gpu::IpcGeometry{});
  if (!segment) throw std::runtime_error("CudaIpcSegment::create: " + segment.error().describe());
  return std::move(*segment);
}

std::vector<std::string> referenceDigests(const std::string& model, std::uint64_t seed, std::uint64_t rounds) {
  auto specs = gpu_peer::peerModelTensors(model);
  if (!specs) throw std::runtime_error(specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) throw std::runtime_error(manifest.error().describe());
  std::vector<std::vector<std::byte>> content;
  for (std::size_t i = 0; i < manifest->size(); ++i) content.emplace_back(manifest->tensorBytes(i));
  gpu_peer::fillContent(content, seed);
  const std::vector<std::span<const std::byte>> views(content.begin(), content.end());
  std::vector<std::string> digests;
  for (std::uint64_t round = 1; round <= rounds; ++round) {
    gpu_peer::moveContentToVersion(content, seed, round);
    digests.push_back(gpu_peer::digestHex(bus::deviceChecksumOfHost(views)));
  }
  return digests;
}

std::uint64_t modelBytes(const std::string& model) {
  auto specs = gpu_peer::peerModelTensors(model);
  if (!specs) throw std::runtime_error(specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) throw std::runtime_error(manifest.error().describe());
  return manifest->totalBytes();
}

void expectEveryRoundRight(PeerGroup& group, const GroupOptions& options, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (GpuPeer* peer : group.all()) {
    const auto left =
        std::max(std::chrono::milliseconds{0},
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    const std::optional<int> status = peer->process.wait(left);
    ASSERT_TRUE(status.has_value()) << peer->name << " still runs after " << timeout.count() << " ms\n"
                                    << peer->output();
    // Exit 0 also means the peer found every byte and the host digest right itself.
    EXPECT_EQ(*status, gpu_peer::kOk) << peer->name << " failed\n" << peer->output();
  }
  if (testing::Test::HasFailure()) return;

  const std::vector<std::string> digests = referenceDigests(options.model, options.seed, options.rounds);
  const std::uint64_t bytes = modelBytes(options.model);
  for (std::size_t round = 1; round < digests.size(); ++round) {
    ASSERT_NE(digests[round], digests[round - 1]) << "consecutive versions must differ";
  }
  for (GpuPeer* peer : group.all()) {
    const std::vector<RoundReport> rounds = peer->rounds();
    ASSERT_EQ(rounds.size(), options.rounds) << peer->output();
    for (std::size_t index = 0; index < rounds.size(); ++index) {
      const RoundReport& report = rounds[index];
      EXPECT_EQ(report.round, index + 1) << peer->name;
      ASSERT_TRUE(report.ok) << peer->name << ": " << report.line;
      EXPECT_EQ(report.number("bytes"), bytes) << peer->name << ": " << report.line;
      EXPECT_EQ(report.text("digest"), digests[index]) << peer->name << ": " << report.line;
    }
  }
}

char processState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t nameEnd = line.rfind(')');  // the state follows the command name, which may hold spaces
  if (nameEnd == std::string::npos || nameEnd + 2 >= line.size()) return '?';
  return line[nameEnd + 2];
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

}  // namespace wsync::test
