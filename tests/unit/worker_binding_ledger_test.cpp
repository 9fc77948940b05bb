// The ledger of the memory live workers of a process bound: a second worker is refused any byte a first one holds,
// naming its tensor, the other worker and the other's tensor; a refused claim holds nothing; released memory (a
// stopped worker's) can be claimed again; disjoint memory and empty spans never conflict.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "binding_ledger.hpp"

namespace wsync::worker_agent::detail {
namespace {

using msg::DType;

class BindingLedgerTest : public testing::Test {
 protected:
  // Bindings of F32 tensors over storage_: each (name, offset, bytes).
  std::shared_ptr<const WorkerBindings> bindingsOf(
      const std::vector<std::tuple<std::string, std::size_t, std::size_t>>& tensors) {
    WorkerBindings bindings;
    for (const auto& [name, offset, bytes] : tensors) {
      const auto bound = bindings.bind(name, DType::F32, {static_cast<std::int64_t>(bytes / 4)},
                                       std::span(storage_).subspan(offset, bytes));
      EXPECT_TRUE(bound.has_value()) << bound.error().describe();
    }
    return std::make_shared<const WorkerBindings>(std::move(bindings));
  }

  std::vector<std::byte> storage_ = std::vector<std::byte>(1024);
  BindingLedger ledger_;  // this test's own, not the process's
};

TEST_F(BindingLedgerTest, ASecondWorkerIsRefusedBytesAFirstHoldsNamingBothTensorsAndTheWorker) {
  auto first = ledger_.claim("worker-a", bindingsOf({{"embed", 0, 64}, {"head", 256, 16}}));
  ASSERT_TRUE(first.has_value()) << first.error().describe();

  const auto second = ledger_.claim("worker-b", bindingsOf({{"own", 512, 32}, {"lm_head", 264, 16}}));
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, WorkerError::InvalidBinding);
  const std::string& detail = second.error().detail;
  EXPECT_EQ(detail.find("tensor 'lm_head': memory " + formatRange(std::span(storage_).subspan(264, 16)) +
                        " overlaps that of tensor 'head' " + formatRange(std::span(storage_).subspan(256, 16)) +
                        ", bound by worker 'worker-a' of this process"),
            0U)
      << detail;
}

TEST_F(BindingLedgerTest, ARefusedClaimHoldsNothingAndAReleasedOneCanBeClaimedAgain) {
  auto first = ledger_.claim("worker-a", bindingsOf({{"a", 0, 16}}));
  ASSERT_TRUE(first.has_value());
  // Refused for its second tensor: its first, at 512, must not stay claimed.
  ASSERT_FALSE(ledger_.claim("worker-b", bindingsOf({{"b.own", 512, 16}, {"b.shared", 0, 16}})).has_value());
  EXPECT_TRUE(ledger_.claim("worker-c", bindingsOf({{"c", 512, 16}})).has_value());  // released at once: a temporary

  auto held = ledger_.claim("worker-d", bindingsOf({{"d", 768, 16}}));
  ASSERT_TRUE(held.has_value());
  EXPECT_FALSE(ledger_.claim("worker-e", bindingsOf({{"e", 768, 16}})).has_value());
  (*held)->release();
  (*held)->release();  // idempotent, and the destructor after it releases nothing more
  EXPECT_TRUE(ledger_.claim("worker-e", bindingsOf({{"e", 768, 16}})).has_value());

  first->reset();  // a worker destroyed
  EXPECT_TRUE(ledger_.claim("worker-f", bindingsOf({{"f", 0, 16}})).has_value());
}

TEST_F(BindingLedgerTest, DisjointMemoryAndEmptyTensorsNeverConflict) {
  auto first = ledger_.claim("worker-a", bindingsOf({{"a", 0, 16}, {"a.empty", 16, 0}}));
  ASSERT_TRUE(first.has_value());
  // Touching [0, 16) and holding an empty tensor at 16 and one inside a's bytes: nothing shared.
  auto second = ledger_.claim("worker-b", bindingsOf({{"b", 16, 16}, {"b.empty", 16, 0}, {"b.empty.in.a", 8, 0}}));
  EXPECT_TRUE(second.has_value()) << second.error().describe();
}

}  // namespace
}  // namespace wsync::worker_agent::detail
