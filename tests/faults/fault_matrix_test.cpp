// The fault-injection matrix (docs/faults.md): each role (coordinator, trainer, worker) killed, stopped or
// disconnected at each phase of a round (begin, pause, transfer, verify, commit, resume), with the real programs;
// and each role frozen at each phase for longer than every heartbeat and phase timeout ("Freezes": in CI with the
// link timeout shortened; at full length, 10 s and 40 s with the default link timeout, in the `long` suite).
// The faulted process strikes itself (--fault, wsync/cli/fault_injection.hpp) so that every case hits its phase
// exactly. Every case asserts the same things:
//  - the round of the faulted version ends (aborts or commits, as the matrix says) within kOutcomeBound;
//  - committed versions only go up, across coordinator restarts too (a killed coordinator's block is recovered);
//  - no worker serves a version that was not committed, nor bytes other than that version's (checked on dumps);
//  - the survivors go on, and the faulted role, restarted, thawed or reconnected, catches up with a later commit;
//  - nothing leaks: the coordinator's and the steady worker's open files come back to what they were, and at the
//    end no shared-memory segment, socket file or process of the bus is left.
#include <dirent.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "round_fixture.hpp"
#include "stuck_process.hpp"
#include "text_file.hpp"
#include "wsync/cli/fault_injection.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::test {
namespace {

using cli::FaultAction;
using cli::FaultPoint;
using Clock = std::chrono::steady_clock;

// Versions 1 and 2 commit before the fault, so that "keeps its previous version" means something.
constexpr std::uint64_t kFaultVersion = 3;
// 4 MiB in 8 tensors over 1 MiB buckets (the fixture's coordinator): a transfer of several buckets, so that a
// transfer fault strikes after the first bucket and before the last.
constexpr const char* kModel = "synthetic:8:4";
constexpr std::uint64_t kSeed = 1;  // wsync-trainer's default content seed
// The test coordinator's phase timeouts: short, so that a silent peer the heartbeat cannot expose (the
// coordinator's own outage) still ends its round quickly.
constexpr std::chrono::milliseconds kTestPauseTimeout{4000};
constexpr std::chrono::milliseconds kTestTransferTimeout{6000};
// How long a stopped process stays frozen before the test thaws it: past the heartbeat timeout, so that the
// coordinator has declared a frozen agent dead.
constexpr std::chrono::milliseconds kFrozenFor{2500};
// The freezes past every timeout, as CI runs them: the programs' link timeout (ZMTP heartbeats) shortened to this,
// and a freeze longer than it, the heartbeat timeout and both phase timeouts together.
constexpr std::chrono::milliseconds kShortLinkTimeout{1500};
constexpr std::chrono::milliseconds kFreezePastEveryTimeout{8000};
// The full-length freezes of the issue that asked for them (ctest -L long), with the default link timeout (5 s).
constexpr std::chrono::milliseconds kLongFreezes[] = {std::chrono::milliseconds(10'000),
                                                      std::chrono::milliseconds(40'000)};
// The round of the faulted version must end within this: the longest phase timeout, plus a disconnect's outage
// or a freeze, plus the heartbeat timeout, plus slack for a loaded 2-core machine (sanitizer builds). A frozen
// coordinator's round can only end after the thaw: its freeze is added.
constexpr std::chrono::seconds kOutcomeBound{20};
// After a thaw the bus commits again within this: the frozen side's link found lost (the link timeout), its agents
// registered again (their old registrations expire within a heartbeat timeout, or are replaced at once), the
// trainer told its version's fate, and one round. Slack as above.
constexpr std::chrono::seconds kResumeAfterThaw{20};
// Open files come back to their count before the fault within this (ZeroMQ closes a dead peer's socket on its
// I/O thread, shortly after the peer is gone).
constexpr std::chrono::seconds kFdSettle{10};
// Sockets once everyone is back: the coordinator's three listeners (requests, events, and the bus lock's abstract
// socket) and one connection per peer (the two workers, the trainer, the test's event subscriber); a worker's one
// connection to the coordinator.
constexpr int kCoordinatorSockets = 3 + 4;
constexpr int kWorkerSockets = 1;

enum class Role { Coordinator, Trainer, Worker };
enum class Expect { Aborts, Commits, Either };

struct FaultCase {
  Role role;
  FaultAction action;
  FaultPoint point;
  Expect expect;  // the faulted version's round, where its outcome can be seen (not for a killed coordinator)
  std::chrono::milliseconds frozenFor = kFrozenFor;  // a stop: how long before the thaw
  std::chrono::milliseconds linkTimeout{0};          // every program's --link-timeout-ms (0: the default)
};

const char* roleName(Role role) {
  switch (role) {
    case Role::Coordinator:
      return "coordinator";
    case Role::Trainer:
      return "trainer";
    case Role::Worker:
      return "worker";
  }
  return "unknown";
}

std::string caseName(const FaultCase& c) {
  std::string name = std::string(roleName(c.role)) + "_" + std::string(cli::toString(c.action)) + "_at_" +
                     std::string(bus::toString(c.point));
  if (c.action == FaultAction::Stop && c.frozenFor != kFrozenFor) {
    name += "_for_" + std::to_string(c.frozenFor.count() / 1000) + "s";
  }
  return name;
}

std::string faultSpec(const FaultCase& c) {
  return std::string(cli::toString(c.action)) + "@" + std::string(bus::toString(c.point)) + ":" +
         std::to_string(kFaultVersion);
}

// Open files of a process, split in two: sockets (one per connection or listener, so their number follows who is
// connected at the moment) and the rest (ZeroMQ's eventfds and epolls, files, pipes: fixed once a process runs).
struct OpenFiles {
  int sockets = 0;
  int others = 0;
};

OpenFiles openFiles(pid_t pid) {
  OpenFiles files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    std::error_code unreadable;
    const std::string target = std::filesystem::read_symlink(entry.path(), unreadable).string();
    if (target.starts_with("socket:")) {
      ++files.sockets;
    } else {
      ++files.others;
    }
  }
  return files;
}

// What each open file of `pid` is, for the message of a failed leak check.
std::string describeOpenFiles(pid_t pid) {
  std::string text;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    text +=
        entry.path().filename().string() + " -> " + std::filesystem::read_symlink(entry.path(), error).string() + "\n";
  }
  return text;
}

bool isStopped(pid_t pid) {
  const std::string stat = readTextFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

// Processes whose command line names this bus: none may outlive the test.
std::vector<std::string> processesOfBus(const std::string& bus) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string cmdline = readTextFile(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" " + bus + " ") != std::string::npos || cmdline.ends_with(" " + bus + " ")) {
      found.push_back(name + ": " + cmdline);
    }
  }
  return found;
}

// Shared-memory segments and runtime-folder files of this bus.
std::vector<std::string> filesOfBus(const std::string& bus) {
  std::vector<std::string> found;
  std::vector<std::string> folders{"/dev/shm"};
  if (const char* runtime = std::getenv("WSYNC_RUNTIME_DIR")) folders.emplace_back(runtime);
  for (const auto& folder : folders) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
      const std::string name = entry.path().filename().string();
      if (name.find(bus) != std::string::npos) found.push_back(entry.path().string());
    }
  }
  return found;
}

// The bytes a worker must hold for `version`: wsync-trainer's content of the model at that version.
void expectDumpHoldsACommittedVersion(const std::string& path, const std::set<std::uint64_t>& committed,
                                      const std::string& who) {
  auto file = cli::SafetensorsFile::open(path);
  ASSERT_TRUE(file) << who << ": " << file.error().describe();
  const auto found = file->metadata().find("wsync_version");
  ASSERT_NE(found, file->metadata().end()) << who;
  const std::uint64_t version = std::stoull(found->second);
  EXPECT_TRUE(version == 0 || committed.contains(version))
      << who << " serves version " << version << ", which was never committed";
  auto specs = cli::modelTensors(kModel);
  ASSERT_TRUE(specs);
  ASSERT_EQ(file->tensors().size(), specs->size()) << who;
  for (std::size_t index = 0; index < specs->size(); ++index) {
    const auto held = file->bytes(index);
    std::vector<std::byte> expected(held.size());
    if (version > 0) {
      cli::fillTensor(expected, kSeed, static_cast<std::uint32_t>(index));
      cli::perturbTensor(expected, kSeed, static_cast<std::uint32_t>(index), version);
    }  // version 0: a worker's weights start zeroed
    ASSERT_TRUE(std::equal(held.begin(), held.end(), expected.begin()))
        << who << ": tensor " << (*specs)[index].name << " is not version " << version << "'s: a partial apply";
  }
}

class FaultMatrix : public RoundFixture, public ::testing::WithParamInterface<FaultCase> {
 protected:
  // Every program of the case gets its link timeout.
  void addLinkTimeout(std::vector<std::string>& args) const {
    if (GetParam().linkTimeout.count() > 0) {
      args.insert(args.end(), {"--link-timeout-ms", std::to_string(GetParam().linkTimeout.count())});
    }
  }
  std::vector<std::string> coordinatorArgs(bool withFault) const {
    std::vector<std::string> args{"--pause-timeout-ms", std::to_string(kTestPauseTimeout.count()),
                                  "--transfer-timeout-ms", std::to_string(kTestTransferTimeout.count())};
    if (withFault) args.insert(args.end(), {"--fault", faultSpec(GetParam())});
    addLinkTimeout(args);
    return args;
  }
  std::vector<std::string> workerArgs(const std::string& id, std::optional<std::string> fault) const {
    std::vector<std::string> args{"--model", kModel, "--dump", path(id + ".safetensors")};
    if (fault) args.insert(args.end(), {"--fault", *fault});
    addLinkTimeout(args);
    return args;
  }
  std::vector<std::string> trainerArgs(bool withFault) const {
    std::vector<std::string> args{"--model", kModel, "--steps", "0", "--interval-ms", "20", "--log-level", "info"};
    if (withFault) args.insert(args.end(), {"--fault", faultSpec(GetParam())});
    addLinkTimeout(args);
    return args;
  }

  // Every commit seen on the event stream, checked to only go up.
  void noteOutcome(const RoundOutcome& outcome) {
    if (!outcome.committed) return;
    EXPECT_GT(outcome.version, lastEventCommit_) << "a commit event below an earlier one";
    lastEventCommit_ = std::max(lastEventCommit_, outcome.version);
    committed_.insert(outcome.version);
  }
  // What the agent wrote in its slot last, registered or not: a survivor the coordinator dropped for a lost
  // connection still serves what its slot says until it registers again.
  std::optional<std::uint64_t> servedVersion(const std::string& agentId) {
    std::optional<std::uint64_t> served;
    for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
      const auto snapshot = block_->agentSlot(slot);
      if (!snapshot || snapshot->agentId != agentId || !snapshot->agentAttached) continue;
      if (snapshot->occupancy == bus::SlotOccupancy::Active) return snapshot->appliedVersion;
      served = snapshot->appliedVersion;
    }
    return served;
  }
  void noteBlock() {
    const std::uint64_t now = block_->committedVersion();
    EXPECT_GE(now, highestInBlock_) << "the control block's committed version went back";
    highestInBlock_ = std::max(highestInBlock_, now);
    if (now > 0) committed_.insert(now);  // committed even where the event never left (a coordinator killed)
  }

  std::set<std::uint64_t> committed_;  // from events and from the control block
  std::uint64_t lastEventCommit_ = 0;
  std::uint64_t highestInBlock_ = 0;
};

TEST_P(FaultMatrix, TheRoundEndsNothingIsLostAndEveryoneCatchesUp) {
  const FaultCase& c = GetParam();
  SCOPED_TRACE(faultSpec(c) + " on the " + roleName(c.role));
  const std::string coordinatorLog = path("coordinator.log");
  startCoordinator(coordinatorArgs(c.role == Role::Coordinator), coordinatorLog);
  // The trainer's pause point needs a pause that lasts: the target worker holds its ack back.
  std::optional<std::string> targetFault;
  if (c.role == Role::Worker) targetFault = faultSpec(c);
  if (c.role == Role::Trainer && c.point == FaultPoint::Pause) {
    targetFault = "delay@begin:" + std::to_string(kFaultVersion) + "+1500";
  }
  std::optional<ChildProcess> steady = startWorker("steady", workerArgs("steady", std::nullopt), path("steady.log"));
  std::optional<ChildProcess> target = startWorker("target", workerArgs("target", targetFault), path("target.log"));
  waitForAgents(2);
  // The versions before the fault come from a first trainer that then leaves, so that no fault can strike before
  // the open-file baselines are taken.
  auto warmup = startTrainer("t0", {"--model", kModel, "--steps", std::to_string(kFaultVersion - 1)});
  RoundOutcome outcome;
  do {
    outcome = nextOutcome();
    ASSERT_NE(outcome.version, 0U) << "no round outcome";
    noteOutcome(outcome);
    noteBlock();
    if (outcome.version < kFaultVersion) {
      ASSERT_TRUE(outcome.committed) << outcome.detail;
    }
  } while (outcome.version + 1 < kFaultVersion);
  ASSERT_EQ(warmup.wait(kPatience), 0);
  ASSERT_TRUE(waitForApplied("steady", kFaultVersion - 1));
  // The files other than sockets, before the fault; sockets are checked against who is connected at the end
  // (their number here depends on the warm-up trainer's connection still closing or not).
  const int coordinatorOthers = openFiles(coordinator_->pid()).others;
  const std::string coordinatorFilesBefore = describeOpenFiles(coordinator_->pid());
  const int steadyOthers = openFiles(steady->pid()).others;
  const std::string steadyFilesBefore = describeOpenFiles(steady->pid());

  std::optional<ChildProcess> trainer = startTrainer("t0", trainerArgs(c.role == Role::Trainer), path("trainer.log"));
  ChildProcess* faultedProcess = c.role == Role::Coordinator ? &*coordinator_
                                 : c.role == Role::Trainer   ? &*trainer
                                                             : &*target;
  ChildProcess& faulted = *faultedProcess;
  std::jthread thaw;  // joins on every exit path, an ASSERT's early return included
  const pid_t faultedPid = faulted.pid();
  // Whose round can only end after the thaw (below).
  const bool waitsForThaw = c.action == FaultAction::Stop &&
                            (c.role == Role::Coordinator || (c.role == Role::Trainer && c.point == FaultPoint::Begin));
  const auto faultDeadline = Clock::now() + kOutcomeBound + (waitsForThaw ? c.frozenFor : Clock::duration{});
  std::optional<Clock::time_point> thawedAt;

  if (c.role == Role::Coordinator && c.action == FaultAction::Kill) {
    ASSERT_EQ(coordinator_->wait(kOutcomeBound), 128 + SIGKILL) << "the coordinator's fault never struck";
    const std::uint64_t before = block_->committedVersion();  // the dead coordinator's block, still mapped
    if (c.point >= FaultPoint::Commit) {
      EXPECT_EQ(before, kFaultVersion) << "killed after its decision, it had committed the version";
    }
    startCoordinator(coordinatorArgs(false), path("coordinator-2.log"));
    EXPECT_GE(block_->committedVersion(), before) << "the restarted coordinator must recover what was committed";
    EXPECT_NE(readTextFile(path("coordinator-2.log"))
                  .find("replaced the control block of coordinator pid " + std::to_string(faultedPid)),
              std::string::npos)
        << "the stale block was not recovered";
    noteBlock();
  } else {
    if (c.action == FaultAction::Kill) {
      // Restarted at once, as a supervisor would: the round of the faulted version may even never have started
      // (a trainer killed as its BeginUpdate left), and only the new trainer makes progress then.
      ASSERT_EQ(faulted.wait(kOutcomeBound), 128 + SIGKILL) << "the kill fault never struck";
      if (c.role == Role::Trainer) {
        trainer.reset();
        trainer.emplace(startTrainer("t0", trainerArgs(false), path("trainer-2.log")));
      } else {
        target.reset();
        target.emplace(startWorker("target", workerArgs("target", std::nullopt), path("target-2.log")));
      }
    }
    // The faulted version's round ends, as the matrix says, in time.
    if (c.action == FaultAction::Stop) {
      while (!isStopped(faultedPid)) {
        ASSERT_LT(Clock::now(), faultDeadline) << "the stop fault never struck";
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      // Thawed after a fixed freeze, not after the round's outcome: a trainer frozen before its BeginUpdate left
      // (ZeroMQ's I/O thread freezes with it) has no round that could end. A frozen agent's round ends during
      // the freeze (heartbeat timeout); a frozen coordinator's only once it runs again, and so does the round of a
      // trainer frozen at its begin when the BeginUpdate had not left yet (on a loaded machine it often has not,
      // and a freeze longer than the outcome bound then has no round to end in time).
      thaw = std::jthread([&faulted, frozenFor = c.frozenFor] {
        std::this_thread::sleep_for(frozenFor);
        faulted.signal(SIGCONT);
      });
      if (waitsForThaw) {
        thaw.join();
        thawedAt = Clock::now();
      }
    }
    do {
      outcome = nextOutcome(kOutcomeBound);
      ASSERT_NE(outcome.version, 0U) << "the round of the faulted version did not end within the bound";
      noteOutcome(outcome);
    } while (outcome.version < kFaultVersion);
    EXPECT_LT(Clock::now(), faultDeadline + kOutcomeBound);
    if (outcome.version == kFaultVersion) {
      if (c.expect == Expect::Aborts) {
        EXPECT_FALSE(outcome.committed) << "expected an abort";
      }
      if (c.expect == Expect::Commits) {
        EXPECT_TRUE(outcome.committed) << outcome.detail;
      }
      if (!outcome.committed && c.role != Role::Coordinator) {
        EXPECT_EQ(outcome.reason, msg::AbortReason::AgentDied) << outcome.detail;
      }
      // A survivor never serves an aborted version (only a restarted trainer publishes it again).
      if (!outcome.committed && !(c.role == Role::Trainer && c.action == FaultAction::Kill)) {
        EXPECT_NE(servedVersion("steady").value_or(0), kFaultVersion) << "a survivor serves an aborted version";
        EXPECT_GE(servedVersion("steady").value_or(0), kFaultVersion - 1) << "a survivor went back";
      }
    }
    if (thaw.joinable()) {
      thaw.join();
      thawedAt = Clock::now();
    }
    noteBlock();
  }

  // Survivors go on and the faulted role catches up: a later version commits and every worker serves it (or a
  // later one: the trainer keeps publishing).
  do {
    outcome = nextOutcome();
    ASSERT_NE(outcome.version, 0U) << "no round outcome after the fault";
    noteOutcome(outcome);
    noteBlock();
  } while (!outcome.committed || outcome.version <= kFaultVersion);
  if (thawedAt) {
    // Nobody stays paused, staged or waiting on an outcome after a thaw: the bus commits again within the bound.
    EXPECT_LT(outcome.at - *thawedAt, kResumeAfterThaw)
        << "the first commit after the fault came "
        << std::chrono::duration_cast<std::chrono::milliseconds>(outcome.at - *thawedAt).count()
        << " ms after the thaw";
  }
  EXPECT_TRUE(waitForAppliedAtLeast("steady", outcome.version)) << "the survivor did not go on";
  EXPECT_TRUE(waitForAppliedAtLeast("target", outcome.version)) << "the faulted worker did not catch up";

  // No leaked file: the coordinator (a new process where it was killed) holds a socket per listener and peer,
  // the steady worker its one connection, and neither more of anything else than before the fault.
  auto settled = [](pid_t pid, int sockets, int others) {
    const auto settle = Clock::now() + kFdSettle;
    while (true) {
      const OpenFiles now = openFiles(pid);
      if ((now.sockets <= sockets && now.others <= others) || Clock::now() >= settle) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  const bool sameCoordinator = !(c.role == Role::Coordinator && c.action == FaultAction::Kill);
  const int coordinatorOthersLimit = sameCoordinator ? coordinatorOthers : std::numeric_limits<int>::max();
  const OpenFiles coordinatorNow = settled(coordinator_->pid(), kCoordinatorSockets, coordinatorOthersLimit);
  EXPECT_LE(coordinatorNow.sockets, kCoordinatorSockets) << "the coordinator leaks connections:\n"
                                                         << describeOpenFiles(coordinator_->pid());
  if (sameCoordinator) {
    EXPECT_LE(coordinatorNow.others, coordinatorOthers) << "the coordinator leaks file descriptors; before:\n"
                                                        << coordinatorFilesBefore << "after:\n"
                                                        << describeOpenFiles(coordinator_->pid());
  }
  const OpenFiles steadyNow = settled(steady->pid(), kWorkerSockets, steadyOthers);
  EXPECT_LE(steadyNow.sockets, kWorkerSockets) << "the steady worker leaks connections:\n"
                                               << describeOpenFiles(steady->pid());
  EXPECT_LE(steadyNow.others, steadyOthers) << "the steady worker leaks file descriptors; before:\n"
                                            << steadyFilesBefore << "after:\n"
                                            << describeOpenFiles(steady->pid());

  // Everyone stops cleanly; the workers' dumps hold committed versions, byte for byte.
  trainer->signal(SIGTERM);
  const auto trainerStatus = trainer->wait(kPatience);
  EXPECT_TRUE(trainerStatus.has_value()) << "the trainer ignored SIGTERM; " << describeStuckProcess(trainer->pid());
  for (auto* worker : {&steady, &target}) {
    (*worker)->signal(SIGTERM);
    const auto status = (*worker)->wait(kPatience);
    EXPECT_EQ(status, 0) << (worker == &steady ? "steady" : "target") << " worker: "
                         << (status ? "exit status " + std::to_string(*status)
                                    : describeStuckProcess((*worker)->pid()));
  }
  noteBlock();
  expectDumpHoldsACommittedVersion(path("steady.safetensors"), committed_, "steady");
  expectDumpHoldsACommittedVersion(path("target.safetensors"), committed_, "target");
  events_.reset();
  block_.reset();
  coordinator_->signal(SIGTERM);
  const auto coordinatorStatus = coordinator_->wait(kPatience);
  EXPECT_EQ(coordinatorStatus, 0) << (coordinatorStatus ? std::string() : describeStuckProcess(coordinator_->pid()));
  coordinator_.reset();
  EXPECT_EQ(processesOfBus(bus_), std::vector<std::string>{}) << "processes of the bus outlived it";
  EXPECT_EQ(filesOfBus(bus_), std::vector<std::string>{}) << "segments or socket files of the bus were left behind";
}

// The matrix of docs/faults.md. Expectations of the faulted version's round: before the coordinator's decision
// (begin, pause, transfer) it aborts; once every digest is in (the coordinator's verify, a worker's commit and
// resume, the trainer's commit and resume) it commits. A worker or trainer struck right after sending its
// UpdateDone (verify) races the others' UpdateDones against the coordinator noticing: either outcome is right.
// A coordinator that is stopped or disconnected and then comes back finds its phase deadline passed (abort) or
// finishes what it had decided (commit).
std::vector<FaultCase> matrix() {
  std::vector<FaultCase> cases;
  for (const FaultAction action : {FaultAction::Kill, FaultAction::Stop, FaultAction::Disconnect}) {
    for (const FaultPoint point : {FaultPoint::Begin, FaultPoint::Pause, FaultPoint::Transfer, FaultPoint::Verify,
                                   FaultPoint::Commit, FaultPoint::Resume}) {
      const bool decided = point >= FaultPoint::Commit;
      cases.push_back({Role::Coordinator, action, point, decided ? Expect::Commits : Expect::Either});
      // A trainer struck just after its BeginUpdate left may be gone before the coordinator reads it: the round
      // never starts, and the restarted trainer publishes the same version again.
      const bool trainerRace = point == FaultPoint::Begin || point == FaultPoint::Verify;
      cases.push_back({Role::Trainer, action, point,
                       decided       ? Expect::Commits
                       : trainerRace ? Expect::Either
                                     : Expect::Aborts});
      cases.push_back({Role::Worker, action, point,
                       decided                       ? Expect::Commits
                       : point == FaultPoint::Verify ? Expect::Either
                                                     : Expect::Aborts});
    }
  }
  return cases;
}

// Each role frozen at each phase for `frozenFor`, past every heartbeat and phase timeout: the links of the frozen
// process time out on both sides, its peers go on or register again, and the bus commits again soon after the thaw.
// The faulted round's outcome is that of a shorter stop.
std::vector<FaultCase> freezes(std::chrono::milliseconds frozenFor, std::chrono::milliseconds linkTimeout) {
  std::vector<FaultCase> cases;
  for (const FaultCase& stop : matrix()) {
    if (stop.action != FaultAction::Stop) continue;
    FaultCase frozen = stop;
    frozen.frozenFor = frozenFor;
    frozen.linkTimeout = linkTimeout;
    cases.push_back(frozen);
  }
  return cases;
}

#ifdef WSYNC_LONG_FAULTS
// ctest -L long: the freezes at full length (minutes in all), run by hand and reported (docs/faults.md).
std::vector<FaultCase> longFreezes() {
  std::vector<FaultCase> cases;
  for (const auto frozenFor : kLongFreezes) {
    const auto some = freezes(frozenFor, std::chrono::milliseconds(0));
    cases.insert(cases.end(), some.begin(), some.end());
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(LongFreezes, FaultMatrix, ::testing::ValuesIn(longFreezes()),
                         [](const auto& testInfo) { return caseName(testInfo.param); });
#else
INSTANTIATE_TEST_SUITE_P(EveryRoleActionAndPhase, FaultMatrix, ::testing::ValuesIn(matrix()),
                         [](const auto& testInfo) { return caseName(testInfo.param); });
INSTANTIATE_TEST_SUITE_P(Freezes, FaultMatrix, ::testing::ValuesIn(freezes(kFreezePastEveryTimeout, kShortLinkTimeout)),
                         [](const auto& testInfo) { return caseName(testInfo.param); });
#endif

}  // namespace
}  // namespace wsync::test
