// WSYNC_NCCL_ENQUEUE: the agents' way to choose how the nccl channel hands broadcasts to NCCL. Unset or empty is the
// guarded blocking child; "nonblocking" is the way back; anything else, "blocking" included (a blocking communicator
// cannot time out while the ranks join, and the channel has none), is refused with a message that names the variable
// and the values it takes.
#include "wsync/bus/channel/nccl/nccl_enqueue.hpp"

#include <gtest/gtest.h>

namespace wsync::bus::gpu {
namespace {

TEST(NcclEnqueue, UnsetOrEmptyIsTheGuardedChild) {
  EXPECT_EQ(agentNcclEnqueue(nullptr).value(), NcclEnqueue::BlockingChild);
  EXPECT_EQ(agentNcclEnqueue("").value(), NcclEnqueue::BlockingChild);
  EXPECT_EQ(agentNcclEnqueue("child").value(), NcclEnqueue::BlockingChild);
}

TEST(NcclEnqueue, NonblockingIsTheWayBack) {
  EXPECT_EQ(agentNcclEnqueue("nonblocking").value(), NcclEnqueue::NonBlocking);
}

TEST(NcclEnqueue, BlockingIsRefusedNamingTheChoices) {
  const auto chosen = agentNcclEnqueue("blocking");
  ASSERT_FALSE(chosen.has_value());
  EXPECT_EQ(chosen.error().code, ChannelError::Unsupported);
  EXPECT_EQ(chosen.error().detail, "WSYNC_NCCL_ENQUEUE='blocking': use child (the default) or nonblocking");
}

TEST(NcclEnqueue, AnUnknownValueIsRefusedNamingTheChoices) {
  const auto chosen = agentNcclEnqueue("Child ");
  ASSERT_FALSE(chosen.has_value());
  EXPECT_EQ(chosen.error().detail, "WSYNC_NCCL_ENQUEUE='Child ': use child (the default) or nonblocking");
}

TEST(NcclEnqueue, EveryModeIsNamedBackByItsName) {
  for (const NcclEnqueue enqueue : {NcclEnqueue::BlockingChild, NcclEnqueue::NonBlocking}) {
    EXPECT_EQ(ncclEnqueueNamed(toString(enqueue)), enqueue);
  }
  EXPECT_FALSE(ncclEnqueueNamed("guarded").has_value());
  EXPECT_FALSE(ncclEnqueueNamed("blocking").has_value());
}

}  // namespace
}  // namespace wsync::bus::gpu
