// The coordinator's side of the nccl channel (nccl_channel_owner.hpp), which needs NCCL but no GPU: a round of one
// sender and a region round of several sources each get a communicator id for their members, ranked sources first;
// the same members keep it while rounds commit, other members or an abort after the transfer began get a new one.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "wsync/bus/channel/gpu/gpu_runtime.hpp"
#include "wsync/bus/channel/nccl/nccl_channel_owner.hpp"

namespace wsync::test {
namespace {

std::vector<bus::ChannelMember> members(const char* prefix, int count) {
  std::vector<bus::ChannelMember> out;
  for (int index = 0; index < count; ++index) {
    const std::string name = prefix + std::to_string(index);
    bus::ChannelMember member;
    member.agentId = name;
    member.memberKey = "key-" + name;
    out.push_back(std::move(member));
  }
  return out;
}

class NcclChannelOwnerTest : public testing::Test {
 protected:
  void SetUp() override {
    if (auto version = bus::gpu::ncclVersion(); !version) {
      GTEST_SKIP() << "NCCL cannot be loaded: " << version.error().describe();
    }
  }
  bus::gpu::NcclChannelOwner owner_;
};

TEST_F(NcclChannelOwnerTest, ARegionRoundsSourcesAndWorkersShareOneCommunicatorWhileTheyStayTheSame) {
  const auto sources = members("t", 2);
  const auto workers = members("w", 3);
  auto grant = owner_.prepareSources(sources, workers);
  ASSERT_TRUE(grant.has_value()) << grant.error();
  EXPECT_TRUE(grant->ranked);
  EXPECT_EQ(grant->groupId.size(), bus::gpu::kNcclUniqueIdBytes);
  auto again = owner_.prepareSources(sources, workers);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->groupId, grant->groupId);
  // An abort before any byte moved leaves the communicator as it was; one after needs a new one.
  owner_.abort(1, false);
  EXPECT_EQ(owner_.prepareSources(sources, workers)->groupId, grant->groupId);
  owner_.abort(2, true);
  auto fresh = owner_.prepareSources(sources, workers);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_NE(fresh->groupId, grant->groupId);
  // Other members (a source more; the sources as the sender of a whole round) are another communicator.
  auto more = owner_.prepareSources(members("t", 3), workers);
  ASSERT_TRUE(more.has_value());
  EXPECT_NE(more->groupId, fresh->groupId);
  auto whole = owner_.prepare(sources[0], workers);
  ASSERT_TRUE(whole.has_value());
  EXPECT_NE(whole->groupId, more->groupId);
}

TEST_F(NcclChannelOwnerTest, ARegionRoundWithoutSourcesIsRefusedAndOneWithoutWorkersNeedsNoCommunicator) {
  auto none = owner_.prepareSources({}, members("w", 1));
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error(), "a region round on nccl needs at least one source");
  auto alone = owner_.prepareSources(members("t", 2), {});
  ASSERT_TRUE(alone.has_value()) << alone.error();
  EXPECT_TRUE(alone->groupId.empty());
}

}  // namespace
}  // namespace wsync::test
