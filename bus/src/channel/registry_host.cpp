// wsync::channels in a build without CUDA: no GPU channel (gpu_registry.hpp).
#include <string>

#include "channel/gpu_registry.hpp"

namespace wsync::bus {

namespace {

constexpr const char* kNoCuda =
    "this wsync-coordinator was built without the CUDA Toolkit: only the host channels (shm, tcp)";

// A GPU channel in a coordinator built without CUDA: a round without receivers still commits (nothing moves, as in
// a CUDA build), any other is refused with the reason, after the round's workers were checked for the channel.
class UnavailableChannelOwner final : public ChannelOwner {
 public:
  explicit UnavailableChannelOwner(msg::ChannelKind kind) : kind_(kind) {}
  msg::ChannelKind kind() const override { return kind_; }
  TensorMemory tensorMemory() const override { return channelMemory(kind_); }
  std::uint32_t maxReceivers() const override { return 0; }
  bool crossesHosts() const override { return false; }
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& /*sender*/,
                                                  std::span<const ChannelMember> receivers) override {
    if (receivers.empty()) return ChannelGrant{};
    return tl::unexpected(std::string(kNoCuda));
  }
  void abort(std::uint64_t /*round*/, bool /*transferBegun*/) override {}

 private:
  msg::ChannelKind kind_;
};

}  // namespace

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openGpuChannel(const msg::TransferPlan& plan,
                                                                      const ChannelSetup& /*setup*/) {
  return fail(ChannelError::Unsupported, "channel " + channelName(plan.channel()) +
                                             " is not in this build of wsync (built without the CUDA Toolkit)");
}

std::vector<msg::ChannelKind> buildChannels() { return {msg::ChannelKind::Shm, msg::ChannelKind::Tcp}; }

std::vector<std::unique_ptr<ChannelOwner>> gpuChannelOwners(const ChannelOwnersConfig& /*config*/) {
  std::vector<std::unique_ptr<ChannelOwner>> owners;
  owners.push_back(std::make_unique<UnavailableChannelOwner>(msg::ChannelKind::Nccl));
  owners.push_back(std::make_unique<UnavailableChannelOwner>(msg::ChannelKind::CudaIpc));
  return owners;
}

}  // namespace wsync::bus
