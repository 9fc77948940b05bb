// streamingCopy: every byte lands, whatever the sizes and the alignments of either side (the streaming body needs
// an aligned target, so head and tail take other paths), and nothing around the target is touched.
#include "wsync/bus/channel/shm/streaming_copy.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wsync::bus {
namespace {

constexpr std::size_t kGuard = 128;  // bytes checked untouched on each side of the target

TEST(StreamingCopy, CopiesEveryByteAtAnyAlignmentAndTouchesNothingElse) {
  const std::vector<std::uint64_t> sizes{0,
                                         1,
                                         15,
                                         63,
                                         64,
                                         65,
                                         kStreamingCopyMinBytes - 1,
                                         kStreamingCopyMinBytes,
                                         kStreamingCopyMinBytes + 1,
                                         16 * 1024 + 37,
                                         300'000};
  std::vector<std::byte> source(300'000 + 64);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  for (const std::uint64_t bytes : sizes) {
    for (const std::size_t targetShift : {0UL, 1UL, 8UL, 16UL, 33UL, 63UL}) {
      for (const std::size_t sourceShift : {0UL, 3UL, 16UL, 48UL}) {
        std::vector<std::byte> target(bytes + 2 * kGuard + 64, std::byte{0xA5});
        std::byte* at = target.data() + kGuard + targetShift;
        streamingCopy(at, source.data() + sourceShift, bytes);
        finishStreamingCopies();
        SCOPED_TRACE(testing::Message() << bytes << " bytes, target +" << targetShift << ", source +" << sourceShift);
        for (std::uint64_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(at[i], source[sourceShift + i]) << "byte " << i;
        }
        for (std::byte* guard = target.data(); guard < at; ++guard) ASSERT_EQ(*guard, std::byte{0xA5});
        for (std::byte* guard = at + bytes; guard < target.data() + target.size(); ++guard) {
          ASSERT_EQ(*guard, std::byte{0xA5});
        }
      }
    }
  }
}

}  // namespace
}  // namespace wsync::bus
