#pragma once
// The coordinator's side of a channel, faked (tests/fakes): prepare hands out a grant of the test's choosing, or
// refuses when told to; every prepare and abort is logged where the test still reads it after the code under test
// took the owner.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "wsync/bus/channel/channel_owner.hpp"

namespace wsync::test {

struct FakeChannelOwnerLog {
  struct Prepared {
    std::string sender;                  // agent ids; a region round's sources joined by commas
    std::vector<std::string> receivers;  // in receiver order
    bool sources = false;                // prepareSources (a region round), not prepare
  };
  struct Aborted {
    std::uint64_t round = 0;
    bool transferBegun = false;
    friend bool operator==(const Aborted&, const Aborted&) = default;
  };
  std::vector<Prepared> prepared;
  std::vector<Aborted> aborted;
  // The next prepare refuses with this text.
  std::optional<std::string> refuseNextPrepare;
};

// What kind of channel a fake owner stands for.
struct FakeChannelTraits {
  msg::ChannelKind kind = msg::ChannelKind::Shm;
  bus::TensorMemory memory = bus::TensorMemory::Host;
  bool crossesHosts = false;
  std::uint32_t maxReceivers = 64;
  bus::ChannelGrant grant{};  // what every prepare hands out
  bool regions = true;        // whether prepareSources hands it out too, or refuses as a channel without regions
};

class FakeChannelOwner final : public bus::ChannelOwner {
 public:
  FakeChannelOwner(FakeChannelTraits traits, FakeChannelOwnerLog& log) : traits_(std::move(traits)), log_(log) {}

  msg::ChannelKind kind() const override { return traits_.kind; }
  bus::TensorMemory tensorMemory() const override { return traits_.memory; }
  std::uint32_t maxReceivers() const override { return traits_.maxReceivers; }
  bool crossesHosts() const override { return traits_.crossesHosts; }

  tl::expected<bus::ChannelGrant, std::string> prepare(const bus::ChannelMember& sender,
                                                       std::span<const bus::ChannelMember> receivers) override {
    FakeChannelOwnerLog::Prepared call{sender.agentId, {}};
    for (const bus::ChannelMember& receiver : receivers) call.receivers.push_back(receiver.agentId);
    log_.prepared.push_back(std::move(call));
    if (log_.refuseNextPrepare) return tl::unexpected(*std::exchange(log_.refuseNextPrepare, std::nullopt));
    return traits_.grant;
  }
  tl::expected<bus::ChannelGrant, std::string> prepareSources(std::span<const bus::ChannelMember> senders,
                                                              std::span<const bus::ChannelMember> receivers) override {
    FakeChannelOwnerLog::Prepared call{{}, {}, true};
    for (const bus::ChannelMember& sender : senders) call.sender += (call.sender.empty() ? "" : ",") + sender.agentId;
    for (const bus::ChannelMember& receiver : receivers) call.receivers.push_back(receiver.agentId);
    log_.prepared.push_back(std::move(call));
    if (!traits_.regions) return tl::unexpected(std::string("the fake channel carries no region rounds"));
    if (log_.refuseNextPrepare) return tl::unexpected(*std::exchange(log_.refuseNextPrepare, std::nullopt));
    return traits_.grant;
  }
  void abort(std::uint64_t round, bool transferBegun) override { log_.aborted.push_back({round, transferBegun}); }

 private:
  FakeChannelTraits traits_;
  FakeChannelOwnerLog& log_;
};

}  // namespace wsync::test
