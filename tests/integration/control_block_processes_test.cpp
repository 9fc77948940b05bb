// The control block across real processes: a live owner is never clobbered, a killed one's block is replaced,
// readers in one process stay consistent while another writes, and an agent process writes its own slot.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <filesystem>
#include <optional>
#include <thread>

#include "test_environment.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/cli/child_process.hpp"

namespace wsync::bus {
namespace {

using cli::ChildProcess;

// Generous: a helper process starts in milliseconds, but CI machines are shared and may be slow.
constexpr std::chrono::seconds kStartupTimeout{20};
constexpr std::chrono::seconds kExitTimeout{10};
constexpr std::chrono::milliseconds kPollInterval{5};
constexpr std::chrono::milliseconds kRaceDuration{700};

// Waits until `condition` holds; false after `timeout`.
template <typename Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout = kStartupTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

std::optional<ControlBlockView> openWhenReady(const std::string& bus) {
  std::optional<ControlBlockView> view;
  eventually([&] {
    auto opened = ControlBlockView::open(bus);
    if (opened) view.emplace(std::move(*opened));
    return view.has_value();
  });
  return view;
}

TEST(ControlBlockProcesses, LiveOwnerIsNeverClobbered) {
  const std::string bus = test::uniqueBusName("live");
  auto holder = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "7"});
  auto view = openWhenReady(bus);
  ASSERT_TRUE(view.has_value()) << "the holder never created the block";
  ASSERT_TRUE(eventually([&] { return view->committedVersion() == 7; }));

  auto second = ControlBlockOwner::create(bus);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ControlBlockError::BusInUse);
  EXPECT_NE(second.error().detail.find(std::to_string(holder.pid())), std::string::npos) << second.error().detail;

  auto reopened = ControlBlockView::open(bus);
  ASSERT_TRUE(reopened.has_value());
  EXPECT_EQ(reopened->epoch(), view->epoch());
  EXPECT_EQ(reopened->committedVersion(), 7U);
}

// The defect this guards against: with the segment unlinked, a second coordinator started under another runtime
// folder found no lock and no live block, and ran beside the first. The bus is held by an abstract socket instead,
// which neither the runtime folder nor deleted files affect.
TEST(ControlBlockProcesses, OwnerIsNamedWhateverTheRuntimeFolderAndAfterItsSegmentIsGone) {
  const std::string bus = test::uniqueBusName("unlinked");
  auto holder = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "4"});
  auto view = openWhenReady(bus);
  ASSERT_TRUE(view.has_value()) << "the holder never created the block";
  ASSERT_TRUE(boost::interprocess::shared_memory_object::remove(view->segmentName().c_str()));

  const std::string otherFolder = test::useTemporaryRuntimeDirectory() + "/other-" + bus;
  std::filesystem::create_directory(otherFolder);
  std::filesystem::permissions(otherFolder, std::filesystem::perms::owner_all);
  const std::string ownFolder = std::getenv("WSYNC_RUNTIME_DIR");
  ::setenv("WSYNC_RUNTIME_DIR", otherFolder.c_str(), 1);  // for this process and the second holder below
  auto second = ControlBlockOwner::create(bus);
  auto secondHolder = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "9"});
  const std::optional<int> secondExit = secondHolder.wait(kExitTimeout);
  ::setenv("WSYNC_RUNTIME_DIR", ownFolder.c_str(), 1);

  ASSERT_FALSE(second.has_value()) << "a second owner ran beside the first";
  EXPECT_EQ(second.error().code, ControlBlockError::BusInUse);
  EXPECT_NE(second.error().detail.find("coordinator pid " + std::to_string(holder.pid())), std::string::npos)
      << second.error().detail;
  EXPECT_EQ(secondExit, 3) << "the second holder process was not refused";
  EXPECT_FALSE(ControlBlockView::open(bus).has_value()) << "nobody may have made a new block beside the holder";
  EXPECT_FALSE(holder.wait(std::chrono::milliseconds(0)).has_value()) << "the first holder died";
}

TEST(ControlBlockProcesses, SecondHolderProcessRefusesToStart) {
  const std::string bus = test::uniqueBusName("twice");
  auto first = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "1"});
  ASSERT_TRUE(openWhenReady(bus).has_value());
  auto second = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "2"});
  EXPECT_EQ(second.wait(kExitTimeout), 3);
  EXPECT_EQ(ControlBlockView::open(bus)->committedVersion(), 1U);
}

// SIGKILL leaves the segment behind; the next owner replaces it, whether or not the dead one was reaped yet, and
// carries on its committed version.
TEST(ControlBlockProcesses, KilledOwnersBlockIsReplaced) {
  for (const bool reapFirst : {true, false}) {
    SCOPED_TRACE(reapFirst ? "reaped" : "zombie");
    const std::string bus = test::uniqueBusName("stale");
    auto holder = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"own", bus, "5"});
    auto old = openWhenReady(bus);
    ASSERT_TRUE(old.has_value());
    ASSERT_TRUE(eventually([&] { return old->committedVersion() == 5; }));

    holder.signal(SIGKILL);
    if (reapFirst) {
      ASSERT_TRUE(holder.wait(kExitTimeout).has_value());
    }
    // The abstract socket goes with the process, zombie or not; with it gone the segment is stale but still there.
    ASSERT_TRUE(eventually([&] {
      auto owner = ControlBlockOwner::create(bus);
      if (!owner) return false;
      EXPECT_NE(owner->epoch(), old->epoch());
      EXPECT_EQ(owner->committedVersion(), 5U);
      EXPECT_TRUE(owner->replaced().has_value());
      return true;
    })) << "the stale block was never replaced";
    EXPECT_EQ(old->committedVersion(), 5U);  // the old mapping stays readable for whoever still holds it
  }
}

TEST(ControlBlockProcesses, ReadersStayConsistentWhileAnotherProcessWrites) {
  const std::string bus = test::uniqueBusName("race");
  auto holder = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"churn", bus});
  auto view = openWhenReady(bus);
  ASSERT_TRUE(view.has_value());

  auto read = [&](std::uint64_t& consistentReads) {
    std::uint64_t last = 0;
    const auto deadline = std::chrono::steady_clock::now() + kRaceDuration;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::uint64_t committed = view->committedVersion();
      ASSERT_GE(committed, last) << "the committed version went back";
      last = committed;
      if (auto slot = view->agentSlot(0); slot && slot->occupancy == SlotOccupancy::Active) {
        ASSERT_EQ(slot->agentId, "agent-" + std::to_string(slot->rank)) << "torn slot";
        ASSERT_EQ(slot->pid, static_cast<std::uint32_t>(slot->rank)) << "torn slot";
        ++consistentReads;
      }
    }
  };
  std::uint64_t readsA = 0;
  std::uint64_t readsB = 0;
  std::thread other([&] { read(readsB); });
  read(readsA);
  other.join();
  EXPECT_GT(readsA + readsB, 100U);
  EXPECT_GT(view->committedVersion(), 1000U) << "the writer barely ran; the race was not exercised";
}

TEST(ControlBlockProcesses, AgentProcessWritesItsOwnSlot) {
  const std::string bus = test::uniqueBusName("agent");
  auto owner = ControlBlockOwner::create(bus);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  ASSERT_TRUE(owner->assignSlot(3, SlotAssignment{"worker-3", msg::Role::Worker, 1, 0}).has_value());

  auto agent = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"attach", bus, "3", "worker-3", "42"});
  ASSERT_TRUE(eventually([&] { return owner->agentSlot(3)->agentAttached; }));
  EXPECT_EQ(owner->appliedVersion(3), 42U);
  const std::uint64_t firstBeat = owner->agentSlot(3)->heartbeatMs;
  EXPECT_TRUE(eventually([&] { return owner->agentSlot(3)->heartbeatMs > firstBeat; })) << "no heartbeat";

  auto impostor = ChildProcess::spawn(WSYNC_BLOCK_HOLDER, {"attach", bus, "3", "worker-9", "1"});
  EXPECT_EQ(impostor.wait(kExitTimeout), 3);
  EXPECT_EQ(owner->appliedVersion(3), 42U);
}

}  // namespace
}  // namespace wsync::bus
