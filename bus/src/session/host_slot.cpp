// The agent's slot in the control block of the coordinator's host (agent_slot.hpp).
#include "wsync/bus/session/agent_slot.hpp"

namespace wsync::bus {

namespace {

class HostSlot final : public AgentSlot {
 public:
  explicit HostSlot(AgentSlotWriter&& writer) : writer_(std::move(writer)) {}

  void setAppliedVersion(std::uint64_t version) override { writer_.setAppliedVersion(version); }
  void setPhase(AgentPhase phase) override { writer_.setPhase(phase); }
  void beat(std::uint64_t nowMs) override { writer_.beat(nowMs); }
  void setTransferProgress(std::uint64_t round, std::uint64_t bytes) override {
    writer_.setTransferProgress(round, bytes);
  }
  RoundState roundState() const override { return writer_.roundState(); }
  bool coordinatorAlive() const override { return writer_.coordinatorAlive(); }

 private:
  AgentSlotWriter writer_;
};

}  // namespace

tl::expected<std::unique_ptr<AgentSlot>, ControlBlockFailure> openHostSlot(std::string_view busName, std::uint32_t slot,
                                                                           std::string_view agentId,
                                                                           std::uint64_t appliedVersion,
                                                                           std::uint64_t epoch) {
  auto writer = AgentSlotWriter::attach(busName, slot, agentId, appliedVersion, epoch);
  if (!writer) return tl::unexpected(writer.error());
  return std::make_unique<HostSlot>(std::move(*writer));
}

}  // namespace wsync::bus
