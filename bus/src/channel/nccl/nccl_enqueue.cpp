#include "wsync/bus/channel/nccl/nccl_enqueue.hpp"

#include <string>

namespace wsync::bus::gpu {

tl::expected<NcclEnqueue, ChannelFailure> agentNcclEnqueue(const char* value) {
  if (value == nullptr || *value == '\0') return NcclEnqueue::BlockingChild;
  const std::string_view chosen(value);
  const std::optional<NcclEnqueue> named = ncclEnqueueNamed(chosen);
  if (named && *named != NcclEnqueue::Blocking) return *named;
  return fail(ChannelError::Unsupported,
              std::string(kNcclEnqueueVariable) + "='" + std::string(chosen) + "': use child (the default) or " +
                  "nonblocking" +
                  (chosen == toString(NcclEnqueue::Blocking)
                       ? std::string(" (blocking is for measurement only: a blocking communicator cannot time out "
                                     "while the ranks join)")
                       : std::string()));
}

std::optional<NcclEnqueue> ncclEnqueueNamed(std::string_view name) {
  for (const NcclEnqueue enqueue : {NcclEnqueue::BlockingChild, NcclEnqueue::NonBlocking, NcclEnqueue::Blocking}) {
    if (name == toString(enqueue)) return enqueue;
  }
  return std::nullopt;
}

std::string_view toString(NcclEnqueue enqueue) {
  switch (enqueue) {
    case NcclEnqueue::BlockingChild: return "child";
    case NcclEnqueue::NonBlocking: return "nonblocking";
    case NcclEnqueue::Blocking: return "blocking";
  }
  return "unknown";
}

}  // namespace wsync::bus::gpu
