#include "wsync/bus/channel/nccl/nccl_enqueue.hpp"

#include <string>

namespace wsync::bus::gpu {

tl::expected<NcclEnqueue, ChannelFailure> agentNcclEnqueue(const char* value) {
  if (value == nullptr || *value == '\0') return NcclEnqueue::BlockingChild;
  const std::string_view chosen(value);
  if (const std::optional<NcclEnqueue> named = ncclEnqueueNamed(chosen)) return *named;
  return fail(ChannelError::Unsupported, std::string(kNcclEnqueueVariable) + "='" + std::string(chosen) +
                                             "': use child (the default) or nonblocking");
}

std::optional<NcclEnqueue> ncclEnqueueNamed(std::string_view name) {
  for (const NcclEnqueue enqueue : {NcclEnqueue::BlockingChild, NcclEnqueue::NonBlocking}) {
    if (name == toString(enqueue)) return enqueue;
  }
  return std::nullopt;
}

std::string_view toString(NcclEnqueue enqueue) {
  switch (enqueue) {
    case NcclEnqueue::BlockingChild:
      return "child";
    case NcclEnqueue::NonBlocking:
      return "nonblocking";
  }
  return "unknown";
}

}  // namespace wsync::bus::gpu
