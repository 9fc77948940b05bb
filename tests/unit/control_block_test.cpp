// The shared-memory control block within one process: create/open, privacy, layout checks, every writer's
// fields, the slot protocol, and readers racing a writer thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sys/wait.h>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "scoped_env.hpp"
#include "test_environment.hpp"
#include "wsync/bus/state/bus_lock.hpp"
#include "wsync/bus/state/control_block.hpp"

namespace wsync::bus {
namespace {
namespace bip = boost::interprocess;

// Long enough for readers to meet the writer mid-update many times on a loaded 2-core machine.
constexpr std::chrono::milliseconds kRaceDuration{500};

struct ControlBlockTest : testing::Test {
  std::string bus = test::uniqueBusName("cb");
};

// Writes a segment by hand, as a crashed or foreign process would have left it.
void writeSegment(const std::string& bus, int mode, const std::function<void(ControlBlockData&)>& fill) {
  const std::string name = controlBlockSegmentName(bus);
  bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, bip::permissions(mode));
  shm.truncate(sizeof(ControlBlockData));
  bip::mapped_region region(shm, bip::read_write);
  fill(*static_cast<ControlBlockData*>(region.get_address()));
}

using test::ScopedEnv;

// The address of the abstract socket that holds `bus` (BusLock), as another process would reach it.
sockaddr_un busLockAddress(const std::string& bus, socklen_t& length) {
  const std::string name = BusLock::socketName(bus);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

void fillValidHeader(ControlBlockData& data, std::uint32_t pid) {
  data.header.layoutVersion = kControlBlockLayoutVersion;
  data.header.maxAgents = kMaxAgents;
  data.header.segmentBytes = sizeof(ControlBlockData);
  data.header.epoch = 1234;
  data.header.creatorPid = pid;
  data.header.magic.store(kControlBlockMagic);
}

TEST_F(ControlBlockTest, CreateThenOpenSeesTheHeader) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  auto view = ControlBlockView::open(bus);
  ASSERT_TRUE(view.has_value()) << view.error().describe();
  EXPECT_NE(view->epoch(), 0U);
  EXPECT_EQ(view->epoch(), owner->epoch());
  EXPECT_EQ(view->coordinatorPid(), static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(view->committedVersion(), 0U);
  EXPECT_EQ(view->activeAgents(), 0U);
}

TEST_F(ControlBlockTest, SegmentIsPrivateToTheUser) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  struct stat info {};
  ASSERT_EQ(::stat(("/dev/shm/" + owner->segmentName()).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600U);
  EXPECT_EQ(info.st_uid, ::geteuid());
}

TEST_F(ControlBlockTest, OpenWithoutCoordinatorSaysSo) {
  auto view = ControlBlockView::open(bus);
  ASSERT_FALSE(view.has_value());
  EXPECT_EQ(view.error().code, ControlBlockError::NoCoordinator);
  EXPECT_NE(view.error().detail.find(bus), std::string::npos);
}

TEST_F(ControlBlockTest, InvalidBusNameIsRefused) {
  EXPECT_EQ(ControlBlockOwner::create("../x").error().code, ControlBlockError::InvalidBusName);
  EXPECT_EQ(ControlBlockView::open("").error().code, ControlBlockError::InvalidBusName);
}

TEST_F(ControlBlockTest, SecondOwnerIsRefusedAndNamesTheFirst) {
  auto first = ControlBlockOwner::create(bus);
  ASSERT_TRUE(first.has_value());
  first->setCommitted(5, 1);
  auto second = ControlBlockOwner::create(bus);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ControlBlockError::BusInUse);
  EXPECT_NE(second.error().detail.find(std::to_string(::getpid())), std::string::npos) << second.error().detail;
  EXPECT_EQ(first->committedVersion(), 5U);  // not clobbered
}

TEST_F(ControlBlockTest, DestroyingTheOwnerRemovesTheSegmentAndFreesTheBus) {
  {
    auto owner = ControlBlockOwner::create(bus);
    ASSERT_TRUE(owner.has_value());
  }
  EXPECT_EQ(ControlBlockView::open(bus).error().code, ControlBlockError::NoCoordinator);
  EXPECT_TRUE(ControlBlockOwner::create(bus).has_value());
}

TEST_F(ControlBlockTest, MovedOwnerKeepsTheSegment) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  {
    ControlBlockOwner moved(std::move(*owner));
    owner = tl::unexpected(ControlBlockFailure{ControlBlockError::SystemError, "moved away"});  // destroys the husk
    EXPECT_TRUE(ControlBlockView::open(bus).has_value());
  }
  EXPECT_FALSE(ControlBlockView::open(bus).has_value());
}

TEST_F(ControlBlockTest, ViewKeepsItsMappingAfterTheOwnerLeaves) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  owner->setCommitted(9, 2);
  auto view = ControlBlockView::open(bus);
  ASSERT_TRUE(view.has_value());
  owner = tl::unexpected(ControlBlockFailure{ControlBlockError::SystemError, "gone"});
  EXPECT_EQ(view->committedVersion(), 9U);
}

TEST_F(ControlBlockTest, ForeignLayoutIsRefused) {
  writeSegment(bus, 0600, [](ControlBlockData& data) {
    fillValidHeader(data, 1);
    data.header.layoutVersion = kControlBlockLayoutVersion + 1;
  });
  auto view = ControlBlockView::open(bus);
  ASSERT_FALSE(view.has_value());
  EXPECT_EQ(view.error().code, ControlBlockError::LayoutMismatch);
  bip::shared_memory_object::remove(controlBlockSegmentName(bus).c_str());
}

TEST_F(ControlBlockTest, UninitialisedBlockIsNotReadYet) {
  writeSegment(bus, 0600, [](ControlBlockData&) {});  // magic still 0: the creator has not finished
  auto view = ControlBlockView::open(bus);
  ASSERT_FALSE(view.has_value());
  EXPECT_EQ(view.error().code, ControlBlockError::NotInitialized);
  bip::shared_memory_object::remove(controlBlockSegmentName(bus).c_str());
}

TEST_F(ControlBlockTest, SegmentOpenToOthersIsRefused) {
  writeSegment(bus, 0644, [](ControlBlockData& data) { fillValidHeader(data, 1); });
  auto view = ControlBlockView::open(bus);
  ASSERT_FALSE(view.has_value());
  EXPECT_EQ(view.error().code, ControlBlockError::Unsafe);
  bip::shared_memory_object::remove(controlBlockSegmentName(bus).c_str());
}

TEST_F(ControlBlockTest, StaleSegmentOfADeadCreatorIsReplaced) {
  // A pid that surely exited: a child we reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  writeSegment(bus, 0600, [&](ControlBlockData& data) {
    fillValidHeader(data, static_cast<std::uint32_t>(child));
    data.bus.committedVersion.store(41);
    data.bus.committedRound.store(17);
    data.bus.roundWord.store((std::uint64_t{19} << 8) | static_cast<std::uint64_t>(msg::RoundPhase::Transfer));
  });

  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  EXPECT_NE(owner->epoch(), 1234U);
  EXPECT_EQ(owner->coordinatorPid(), static_cast<std::uint32_t>(::getpid()));
  // What the dead coordinator committed goes on: the committed version never goes back across a crash.
  EXPECT_EQ(owner->committedVersion(), 41U);
  ASSERT_TRUE(owner->replaced().has_value());
  EXPECT_EQ(owner->replaced()->creatorPid, static_cast<std::uint32_t>(child));
  EXPECT_EQ(owner->replaced()->committedVersion, 41U);
  EXPECT_EQ(owner->replaced()->committedRound, 17U);
  EXPECT_EQ(owner->replaced()->lastRound, 19U);
  EXPECT_EQ(owner->roundState().phase, msg::RoundPhase::Idle) << "the dead coordinator's round is not carried on";
}

TEST_F(ControlBlockTest, AFreshBusReplacesNothing) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  EXPECT_FALSE(owner->replaced().has_value());
  EXPECT_EQ(owner->committedVersion(), 0U);
}

// The bus is held by an abstract socket, not by a file or the segment: another runtime folder and a deleted
// segment do not let a second owner in, and the refusal names the holder.
TEST_F(ControlBlockTest, SecondOwnerIsRefusedWhateverTheRuntimeFolderAndTheSegment) {
  auto first = ControlBlockOwner::create(bus);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  const std::string otherFolder = test::useTemporaryRuntimeDirectory() + "/elsewhere";
  std::filesystem::create_directory(otherFolder);
  std::filesystem::permissions(otherFolder, std::filesystem::perms::owner_all);
  ScopedEnv elsewhere("WSYNC_RUNTIME_DIR", otherFolder);
  ASSERT_TRUE(bip::shared_memory_object::remove(first->segmentName().c_str()));

  auto second = ControlBlockOwner::create(bus);
  ASSERT_FALSE(second.has_value()) << "a second owner ran beside the first";
  EXPECT_EQ(second.error().code, ControlBlockError::BusInUse);
  const std::string expected = "bus '" + bus + "' is run by coordinator pid " + std::to_string(::getpid()) +
                               " (abstract socket @" + BusLock::socketName(bus) + ")";
  EXPECT_EQ(second.error().detail, expected);
  EXPECT_FALSE(std::filesystem::exists(otherFolder + "/" + bus + ".lock"));
}

TEST_F(ControlBlockTest, TheBusNameIsFreedWithTheOwner) {
  {
    auto owner = ControlBlockOwner::create(bus);
    ASSERT_TRUE(owner.has_value());
  }
  auto again = BusLock::acquire(bus);
  EXPECT_TRUE(again.has_value()) << again.error().describe();
}

// Contenders queue on the holder's socket until its heartbeat dismisses them; a full queue hides only the holder's
// pid, never the fact that the bus is taken.
TEST_F(ControlBlockTest, HeartbeatDismissesContendersSoThatTheHolderStaysNamed) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  socklen_t length = 0;
  const sockaddr_un address = busLockAddress(bus, length);
  constexpr int kContenders = 200;  // more than the holder's listen queue
  for (int n = 0; n < kContenders; ++n) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&address), length);
    ::close(fd);
  }
  auto hidden = ControlBlockOwner::create(bus);
  ASSERT_FALSE(hidden.has_value());
  EXPECT_EQ(hidden.error().code, ControlBlockError::BusInUse);
  EXPECT_NE(hidden.error().detail.find("does not say who it is"), std::string::npos) << hidden.error().detail;

  owner->beat(1);
  auto named = ControlBlockOwner::create(bus);
  ASSERT_FALSE(named.has_value());
  EXPECT_NE(named.error().detail.find("pid " + std::to_string(::getpid())), std::string::npos) << named.error().detail;
}

// Abstract names are not per user: another user can bind ours first. We cannot take it back, so we say who holds it.
TEST_F(ControlBlockTest, AnotherUserSquattingTheNameIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  constexpr uid_t kSquatter = 65534;  // nobody
  socklen_t length = 0;
  const sockaddr_un address = busLockAddress(bus, length);  // our name, computed before the child changes user
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::setresgid(kSquatter, kSquatter, kSquatter) != 0 || ::setresuid(kSquatter, kSquatter, kSquatter) != 0 ||
        ::bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 || ::listen(fd, 8) != 0) {
      ::_exit(1);
    }
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    while (true) ::pause();
  }
  ASSERT_GT(child, 0);
  ::close(ready[1]);
  char byte = 0;
  const bool squatting = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);

  std::optional<tl::expected<ControlBlockOwner, ControlBlockFailure>> refused;
  if (squatting) refused.emplace(ControlBlockOwner::create(bus));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(squatting) << "the child could not bind the name as uid " << kSquatter;

  ASSERT_FALSE(refused->has_value());
  EXPECT_EQ(refused->error().code, ControlBlockError::BusInUse);
  const std::string& detail = refused->error().detail;
  EXPECT_NE(detail.find("held by uid " + std::to_string(kSquatter) + " (pid " + std::to_string(child) + ")"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find("not per user"), std::string::npos) << detail;
  EXPECT_TRUE(ControlBlockOwner::create(bus).has_value()) << "the name stays taken after the squatter died";
}

TEST_F(ControlBlockTest, BusStateRoundTrips) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  auto view = ControlBlockView::open(bus);
  ASSERT_TRUE(view.has_value());

  owner->setCommitted(17, 4);
  EXPECT_EQ(view->committedVersion(), 17U);
  EXPECT_EQ(view->committedRound(), 4U);

  const PauseState paused{true, msg::PauseMode::Keep, (std::uint64_t{1} << 47) + 3};
  owner->setPauseState(paused);
  EXPECT_EQ(view->pauseState(), paused);
  owner->setPauseState(PauseState{});
  EXPECT_FALSE(view->pauseState().paused);

  const RoundState round{msg::RoundPhase::Verify, (std::uint64_t{1} << 55) + 9};
  owner->setRoundState(round);
  EXPECT_EQ(view->roundState(), round);

  owner->setEventsPublished(123);
  EXPECT_EQ(view->eventsPublished(), 123U);
  owner->beat(999);
  EXPECT_EQ(view->coordinatorHeartbeatMs(), 999U);
}

TEST_F(ControlBlockTest, SlotAssignmentAndAgentAttach) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  ASSERT_EQ(owner->findFreeSlot(), 0U);
  ASSERT_TRUE(owner->assignSlot(0, SlotAssignment{"worker-0", msg::Role::Worker, 3, 4242}).has_value());
  EXPECT_EQ(owner->findFreeSlot(), 1U);
  EXPECT_EQ(owner->activeAgents(), 1U);

  auto before = owner->agentSlot(0);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->agentId, "worker-0");
  EXPECT_EQ(before->role, msg::Role::Worker);
  EXPECT_EQ(before->rank, 3);
  EXPECT_EQ(before->pid, 4242U);
  EXPECT_EQ(before->occupancy, SlotOccupancy::Active);
  EXPECT_FALSE(before->agentAttached);

  auto agent = AgentSlotWriter::attach(bus, 0, "worker-0", 6);
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  auto after = owner->agentSlot(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->agentAttached);
  EXPECT_EQ(after->appliedVersion, 6U);
  EXPECT_EQ(after->phase, AgentPhase::Idle);
  EXPECT_GT(after->heartbeatMs, 0U);

  agent->setAppliedVersion(7);
  agent->setPhase(AgentPhase::Receiving);
  agent->beat(31337);
  EXPECT_EQ(owner->appliedVersion(0), 7U);
  EXPECT_EQ(owner->agentSlot(0)->phase, AgentPhase::Receiving);
  EXPECT_EQ(owner->agentSlot(0)->heartbeatMs, 31337U);
  // The agent reads the bus state through the same object.
  owner->setCommitted(7, 1);
  EXPECT_EQ(agent->committedVersion(), 7U);
}

TEST_F(ControlBlockTest, AttachToSomeoneElsesSlotIsRefused) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  ASSERT_TRUE(owner->assignSlot(2, SlotAssignment{"worker-2", msg::Role::Worker, 0, 1}).has_value());
  auto wrong = AgentSlotWriter::attach(bus, 2, "impostor");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ControlBlockError::SlotMismatch);
  EXPECT_NE(wrong.error().detail.find("worker-2"), std::string::npos);
  EXPECT_EQ(AgentSlotWriter::attach(bus, 3, "worker-2").error().code, ControlBlockError::SlotMismatch);  // free
  EXPECT_EQ(AgentSlotWriter::attach(bus, kMaxAgents, "x").error().code, ControlBlockError::SlotOutOfRange);
}

TEST_F(ControlBlockTest, ReusedSlotIsNotAttachedUntilTheNewAgentClaimsIt) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  ASSERT_TRUE(owner->assignSlot(0, SlotAssignment{"old", msg::Role::Worker, 0, 1}).has_value());
  auto old = AgentSlotWriter::attach(bus, 0, "old", 3);
  ASSERT_TRUE(old.has_value());
  ASSERT_TRUE(owner->setOccupancy(0, SlotOccupancy::Dead).has_value());
  EXPECT_EQ(owner->agentSlot(0)->occupancy, SlotOccupancy::Dead);
  EXPECT_EQ(owner->activeAgents(), 0U);
  EXPECT_EQ(owner->agentSlot(0)->agentId, "old");  // kept visible for monitors
  ASSERT_TRUE(owner->setOccupancy(0, SlotOccupancy::Free).has_value());
  EXPECT_EQ(owner->agentSlot(0)->agentId, "");
  EXPECT_EQ(owner->findFreeSlot(), 0U);

  ASSERT_TRUE(owner->assignSlot(0, SlotAssignment{"new", msg::Role::Worker, 0, 2}).has_value());
  auto reassigned = owner->agentSlot(0);
  EXPECT_GT(reassigned->generation, 1U);
  EXPECT_FALSE(reassigned->agentAttached);  // version 3 still belongs to "old"
  auto fresh = AgentSlotWriter::attach(bus, 0, "new", 0);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_TRUE(owner->agentSlot(0)->agentAttached);
  EXPECT_EQ(owner->agentSlot(0)->appliedVersion, 0U);
}

TEST_F(ControlBlockTest, SlotBoundsAndIdLengthAreChecked) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->assignSlot(kMaxAgents, SlotAssignment{"a"}).error().code, ControlBlockError::SlotOutOfRange);
  EXPECT_FALSE(owner->assignSlot(0, SlotAssignment{std::string(64, 'x')}).has_value());
  EXPECT_FALSE(owner->assignSlot(0, SlotAssignment{""}).has_value());
  EXPECT_TRUE(owner->assignSlot(0, SlotAssignment{std::string(63, 'x')}).has_value());
  EXPECT_EQ(owner->agentSlot(0)->agentId, std::string(63, 'x'));
  EXPECT_FALSE(owner->agentSlot(kMaxAgents).has_value());
  EXPECT_EQ(owner->setOccupancy(kMaxAgents, SlotOccupancy::Free).error().code, ControlBlockError::SlotOutOfRange);
}

TEST_F(ControlBlockTest, FullBusHasNoFreeSlot) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  for (std::uint32_t slot = 0; slot < kMaxAgents; ++slot) {
    ASSERT_TRUE(owner->assignSlot(slot, SlotAssignment{"a" + std::to_string(slot)}).has_value());
  }
  EXPECT_FALSE(owner->findFreeSlot().has_value());
  EXPECT_EQ(owner->activeAgents(), kMaxAgents);
}

// Readers never see a slot torn between two writes, and the committed version never goes back, while a
// writer thread rewrites them as fast as it can.
TEST_F(ControlBlockTest, ReadersSeeConsistentStateWhileTheWriterRuns) {
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value());
  auto view = ControlBlockView::open(bus);
  ASSERT_TRUE(view.has_value());

  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint32_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
      owner->setCommitted(n, n);
      // Every field of the slot encodes n, so a mix of two writes is detectable.
      (void)owner->assignSlot(
          0, SlotAssignment{"agent-" + std::to_string(n), msg::Role::Worker, static_cast<std::int32_t>(n), n});
    }
  });

  auto reader = [&](std::atomic<std::uint64_t>& checks) {
    std::uint64_t lastCommitted = 0;
    const auto deadline = std::chrono::steady_clock::now() + kRaceDuration;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::uint64_t committed = view->committedVersion();
      ASSERT_GE(committed, lastCommitted);
      lastCommitted = committed;
      if (auto slot = view->agentSlot(0); slot && slot->occupancy == SlotOccupancy::Active) {
        ASSERT_EQ(slot->agentId, "agent-" + std::to_string(slot->rank));
        ASSERT_EQ(slot->pid, static_cast<std::uint32_t>(slot->rank));
      }
      checks.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::atomic<std::uint64_t> checks{0};
  std::thread readerA([&] { reader(checks); });
  reader(checks);
  readerA.join();
  stop = true;
  writer.join();
  EXPECT_GT(checks.load(), 100U);
  EXPECT_GT(view->committedVersion(), 100U);
}

}  // namespace
}  // namespace wsync::bus
