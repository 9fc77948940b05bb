// The slot of an agent on another host than the coordinator's (agent_slot.hpp, docs/hosts.md).
#include <atomic>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/session/agent_slot.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"

namespace wsync::bus {

namespace {

// The label of the reporting connection's routing id: the agent's own connection is "<agent id>#...".
constexpr std::string_view kReportLabelSuffix = "/slot";

class RemoteSlot final : public AgentSlot {
 public:
  RemoteSlot(RemoteSlotOptions options, DealerEndpoint&& reports, std::uint64_t appliedVersion,
             std::shared_ptr<const BusMirror> mirror)
      : options_(std::move(options)),
        reports_(std::move(reports)),
        mirror_(std::move(mirror)),
        appliedVersion_(appliedVersion) {}

  void setAppliedVersion(std::uint64_t version) override { appliedVersion_.store(version, std::memory_order_release); }
  void setPhase(AgentPhase phase) override {
    phase_.store(static_cast<std::uint32_t>(phase), std::memory_order_release);
  }
  void setTransferProgress(std::uint64_t round, std::uint64_t bytes) override {
    transferRound_.store(round, std::memory_order_relaxed);
    transferBytes_.store(bytes, std::memory_order_relaxed);
  }

  // What the coordinator's host would read in the slot, sent at every beat. A full queue (a coordinator that does
  // not read, a cut link) drops this report; the next one carries the same fields, newer.
  void beat(std::uint64_t /*nowMs*/) override {
    builder_.reset();
    auto& fbb = builder_.fbb();
    const auto report = msg::CreateSlotReport(
        fbb, fbb.CreateString(options_.agentId), options_.slot, appliedVersion_.load(std::memory_order_acquire),
        static_cast<msg::AgentState>(phase_.load(std::memory_order_acquire)),
        transferRound_.load(std::memory_order_relaxed), transferBytes_.load(std::memory_order_relaxed),
        options_.secret.toMessage(fbb));
    (void)reports_.send(builder_.finish(report, EnvelopeStamp{options_.epoch, ++reportSeq_}));
  }

  // A mirror that has not seen this coordinator's round yet answers round 0, which no probe takes for an ended
  // round (PayloadEndpoint::roundEnded); a mirror of another coordinator's beats says its round is over.
  RoundState roundState() const override {
    if (const auto state = mirror_->roundState(options_.epoch)) return *state;
    return RoundState{msg::RoundPhase::Idle, 0};
  }
  bool coordinatorAlive() const override {
    return mirror_->coordinatorAlive(options_.epoch, options_.heartbeatTimeout);
  }

 private:
  const RemoteSlotOptions options_;
  DealerEndpoint reports_;  // used by beat() alone
  MessageBuilder builder_;  // likewise
  std::uint64_t reportSeq_ = 0;
  std::shared_ptr<const BusMirror> mirror_;
  std::atomic<std::uint64_t> appliedVersion_;
  std::atomic<std::uint32_t> phase_{static_cast<std::uint32_t>(AgentPhase::Idle)};
  std::atomic<std::uint64_t> transferRound_{0};
  std::atomic<std::uint64_t> transferBytes_{0};
};

}  // namespace

tl::expected<std::unique_ptr<AgentSlot>, TransportFailure> openRemoteSlot(zmq::context_t& context,
                                                                          RemoteSlotOptions options,
                                                                          std::uint64_t appliedVersion,
                                                                          std::shared_ptr<const BusMirror> mirror) {
  auto reports = DealerEndpoint::connect(
      context, options.requestEndpoint, options.agentId + std::string(kReportLabelSuffix), options.curve, options.link);
  if (!reports) return tl::unexpected(reports.error());
  return std::make_unique<RemoteSlot>(std::move(options), std::move(*reports), appliedVersion, std::move(mirror));
}

}  // namespace wsync::bus
