// wsync::channels in a build without CUDA: the shm channel only.
#include "wsync/bus/open_channel.hpp"

#include <string>

namespace wsync::bus {

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan,
                                                                   const ChannelSetup& setup) {
  if (plan.channel() != msg::ChannelKind::Shm) {
    return fail(ChannelError::Unsupported, std::string("channel ") + msg::EnumNameChannelKind(plan.channel()) +
                                               " is not in this build of wsync (built without the CUDA Toolkit)");
  }
  if (plan.arena() == nullptr || plan.arena()->size() == 0) return fail(ChannelError::NoArena, "the shm plan names no arena");
  auto channel = ShmChannel::open(plan.arena()->str());
  if (!channel) return tl::unexpected(channel.error());
  (*channel)->setCancelProbe(setup.cancelProbe);
  return std::unique_ptr<Channel>(std::move(*channel));
}

std::vector<msg::ChannelKind> buildChannels() { return {msg::ChannelKind::Shm}; }

}  // namespace wsync::bus
