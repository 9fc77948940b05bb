// A process that holds a bus's control block for tests that need a second process (live or killed owner,
// cross-process readers, an agent writing its slot). Runs until killed.
//
//   wsync_test_block_holder own BUS VERSION     create the block, commit VERSION, hold it
//   wsync_test_block_holder churn BUS           create the block, rewrite version and slot 0 without pause
//   wsync_test_block_holder attach BUS SLOT ID VERSION
//                                               attach to SLOT as agent ID and publish VERSION as applied
// Exit codes: 2 bad arguments, 3 the control block call failed (reason on stderr). It never exits by itself
// otherwise.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/state/control_block.hpp"

namespace {

using namespace wsync::bus;
namespace msg = wsync::msg;

// How often a holder beats while it idles; any value works, tests only need it to stay alive.
constexpr std::chrono::milliseconds kIdleBeat{20};

int failWith(const ControlBlockFailure& failure) {
  std::fprintf(stderr, "block_holder: %s\n", failure.describe().c_str());
  return 3;
}

[[noreturn]] void idleForever(const std::function<void()>& beat) {
  while (true) {
    beat();
    std::this_thread::sleep_for(kIdleBeat);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "own" && argc == 4) {
    auto owner = ControlBlockOwner::create(argv[2]);
    if (!owner) return failWith(owner.error());
    owner->setCommitted(std::stoull(argv[3]), 1);
    idleForever([&] { owner->beat(monotonicMillis()); });
  }
  if (mode == "churn" && argc == 3) {
    auto owner = ControlBlockOwner::create(argv[2]);
    if (!owner) return failWith(owner.error());
    for (std::uint32_t n = 1;; ++n) {
      owner->setCommitted(n, n);
      (void)owner->assignSlot(
          0, SlotAssignment{"agent-" + std::to_string(n), msg::Role::Worker, static_cast<std::int32_t>(n), n});
    }
  }
  if (mode == "attach" && argc == 6) {
    auto agent = AgentSlotWriter::attach(argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])), argv[4],
                                         std::stoull(argv[5]));
    if (!agent) return failWith(agent.error());
    idleForever([&] { agent->beat(monotonicMillis()); });
  }
  std::fprintf(stderr, "usage: %s own BUS VERSION | churn BUS | attach BUS SLOT ID VERSION\n", argv[0]);
  return 2;
}
