#pragma once
// The trainer's side of wsync (docs/update-round.md): declare a manifest, publish versions from host buffers (shm,
// tcp channels) or device buffers (nccl, cuda_ipc), learn each version's outcome. One agent per trainer rank; the
// rank that begins a round sends its payload.
//
//   auto trainer = wsync::trainer_agent::TrainerAgent::start({.bus = "rl", .agentId = "trainer-0"});
//   (*trainer)->declareManifest(specs);
//   (*trainer)->publish(step, tensors);            // returns at once; the buffers must not change until...
//   auto outcome = (*trainer)->waitOutcome();      // ...the outcome: committed, or aborted with its reason
//
// Threading: the API may be called from any one thread at a time; an I/O thread inside the agent talks to the
// coordinator and sends the payload, reading the published buffers.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"
#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/transport/curve.hpp"

namespace wsync::bus {
class ChannelListeners;
class PayloadEndpoint;
}  // namespace wsync::bus

namespace wsync::trainer_agent {

enum class TrainerError : std::uint8_t {
  Session,          // registration or the connection failed (see detail)
  InvalidManifest,  // the declared tensors do not form a valid manifest
  InvalidHoldings,  // a sharded rank's regions or rank do not fit the manifest
  NoManifest,       // publish() before declareManifest()
  BufferMismatch,   // a published buffer's size differs from its tensor's
  Busy,             // a version is still in flight: wait for its outcome first
  Stopped,
};

std::string_view toString(TrainerError error);
using TrainerFailure = bus::Failure<TrainerError>;

struct TrainerOptions {
  std::string bus;
  std::string transport = "ipc";
  std::optional<bus::CurveClient> curve{};  // tcp to a coordinator that requires CURVE (bus/curve.hpp)
  std::string agentId;
  std::int32_t requestedRank = -1;
  // The payload channel of every round. shm, tcp: the published spans are host memory. nccl and cuda_ipc (builds
  // with CUDA): they are device memory on `cudaDevice`, and the caller must have finished writing them (synchronised
  // the stream that wrote them) before publish().
  msg::ChannelKind channel = msg::ChannelKind::Shm;
  int cudaDevice = 0;
  bus::LinkHeartbeat link{};  // how soon a silent coordinator's connection counts as lost
  // Test only (tests/faults, docs/faults.md): called at each point of each round; none in production.
  std::shared_ptr<bus::FaultHook> faultHook{};
};

struct PublishOptions {
  std::string label;
  msg::PauseMode pauseMode = msg::PauseMode::Keep;
  // The caller vouches that no tensor at the address it had in the previous publish was freed and allocated again
  // since (bus::Channel::setAllocationsKept): cuda_ipc then skips its per-allocation check of its exports. The
  // Python package sets it from PyTorch's count of cudaFree calls.
  bool allocationsKept = false;
  // The caller's name for `tensors` (bus::Channel::setLayoutToken): a nonzero token it gave before vouches that the
  // array holds the same (address, size) pairs as it did then, element for element, and the GPU channels skip
  // reading it to check their cached layout (100,000 tensors: 0.2 ms a round). 0 names nothing. The C API names
  // the array WSYNC_PUBLISH_SAME_TENSORS repeats.
  std::uint64_t layoutToken = 0;
};

enum class OutcomeKind : std::uint8_t {
  Committed,  // every worker's digest matched and the coordinator committed it; workers apply it right after
  Aborted,    // the round started and ended without a commit (reason, detail)
  Refused,    // the coordinator refused to start the round (detail: its error)
};

struct PublishOutcome {
  std::uint64_t version = 0;
  OutcomeKind kind = OutcomeKind::Aborted;
  msg::AbortReason reason = msg::AbortReason::None;  // Aborted: why
  msg::ErrorCode refusal = msg::ErrorCode::None;     // Refused: the coordinator's error code
  std::string detail;
  std::uint64_t round = 0;
  std::uint64_t bytes = 0;
  bus::Digest digest;
  std::chrono::nanoseconds untilPlan{0};  // begin -> transfer plan: registration of the round and the workers' pause
  std::chrono::nanoseconds sending{0};    // the payload, through the channel
  std::chrono::nanoseconds total{0};      // begin -> outcome

  bool committed() const { return kind == OutcomeKind::Committed; }
};

std::string_view toString(OutcomeKind kind);

// How far the payload of the version in flight has got, for progress bars. Read from any thread; the fields are
// read one by one, so for an instant at a version's start they may mix two versions (fine for a display).
struct PublishProgress {
  std::uint64_t version = 0;     // the version being sent (0: none yet)
  std::uint64_t bytesSent = 0;   // through the channel so far
  std::uint64_t bytesTotal = 0;  // the manifest's bytes
  bool sending = false;          // the payload is moving now: after the transfer plan, before the last bucket
};

class TrainerAgent {
 public:
  // Registers with the coordinator of `options.bus` (waiting for it up to bus::kRegistrationTimeout).
  static tl::expected<std::unique_ptr<TrainerAgent>, TrainerFailure> start(TrainerOptions options);
  ~TrainerAgent();
  TrainerAgent(const TrainerAgent&) = delete;
  TrainerAgent& operator=(const TrainerAgent&) = delete;

  // The ordered tensors every version consists of. Sent to the coordinator with the next round, then referred
  // to by digest.
  tl::expected<void, TrainerFailure> declareManifest(std::vector<bus::TensorSpec> tensors);
  const std::optional<bus::Manifest>& manifest() const { return manifest_; }

  // A rank of a sharded trainer (docs/regions.md): what it holds of every version, a region per buffer it publishes,
  // as rank `rank` of `count`. Every rank of the trainer publishes each version; the coordinator commits it once all
  // have sent their shards. Checked against the manifest here (InvalidManifest names the region); cleared by the next
  // declareManifest(). Without it the trainer holds the whole model, one source alone.
  tl::expected<void, TrainerFailure> declareHoldings(bus::SourceHoldings holdings, std::uint32_t rank,
                                                     std::uint32_t count);
  // Starts publishing `version` from `tensors` (indexed like the manifest, or like the declared holdings' regions,
  // each buffer dense in its region's extents). Returns once the round is handed to the agent; the buffers are read
  // until the outcome is known and must not change before.
  tl::expected<void, TrainerFailure> publish(std::uint64_t version, std::span<const std::span<const std::byte>> tensors,
                                             PublishOptions options = {});
  // The outcome of the version in flight: nothing yet (poll), or wait for it up to `timeout`.
  std::optional<PublishOutcome> pollOutcome();
  std::optional<PublishOutcome> waitOutcome(std::chrono::milliseconds timeout = std::chrono::hours(24));

  PublishProgress progress() const;

  // The bus's committed version as this agent last heard it: from its own commits, its registration, and every
  // answer of the coordinator (a refusal carries it too), so that a trainer refused for a version another trainer
  // committed meanwhile knows where to go on from.
  std::uint64_t committedVersion() const;
  std::int32_t rank() const { return rank_; }
  const std::string& agentId() const { return options_.agentId; }

  // Says goodbye and stops the I/O thread (also done by the destructor).
  void stop();
  bool stopped() const;

 private:
  struct Job;
  TrainerAgent(TrainerOptions options, std::unique_ptr<zmq::context_t> context,
               std::unique_ptr<bus::AgentSession> session, std::shared_ptr<bus::ChannelListeners> listeners);
  void ioLoop();
  void handle(const bus::Message& message);
  void beginRound();
  void sendPayload(const msg::TransferPlan& plan);
  void sendRegions(const msg::TransferPlan& plan);
  // Runs `send` (given the progress callback) as the version's transfer: progress, the sending time, the fault point.
  template <typename Send>
  auto sendTimed(std::uint64_t total, Send&& send);
  // publish()'s check of its buffers: one a tensor of the manifest, or one a region of the declared holdings.
  tl::expected<void, TrainerFailure> checkBuffers(std::span<const std::span<const std::byte>> tensors) const;
  // Test faults (options_.faultHook); a disconnect drops the session's connection for its outage.
  void strike(bus::FaultPoint point, std::uint64_t version);
  void strikeDuringPause(std::uint64_t version);
  void finish(PublishOutcome outcome);
  PublishOutcome outcomeOf(OutcomeKind kind) const;
  // The connection to the coordinator was lost: the round of the version in flight is out of our hands.
  void linkLost();
  // Registered again: asks the coordinator what became of the version in flight (VersionQuery).
  void reregistered();
  void askFate();
  void handleFate(const msg::VersionReport& report);
  // The version in flight heard nothing of its round for longer than a round can last: give up the connection.
  void checkOutcomeDeadline();
  void noteCommitted(std::uint64_t version);

  TrainerOptions options_;
  std::unique_ptr<zmq::context_t> context_;  // outlives the session's socket
  std::unique_ptr<bus::AgentSession> session_;
  std::int32_t rank_ = -1;
  std::optional<bus::Manifest> manifest_;
  // declareHoldings(): what this rank holds, shared with each job (the I/O thread declares it with the round).
  struct Holdings {
    bus::SourceHoldings holdings;
    bus::Digest digest;
    std::uint32_t rank = 0;
    std::uint32_t count = 1;
  };
  std::shared_ptr<const Holdings> holdings_;
  // The span array of the last publish that named one (PublishOptions::layoutToken), shared with its job: a publish
  // naming it again is neither checked against the manifest again nor copied (100,000 tensors: 1.6 MB).
  using TensorArray = std::vector<std::span<const std::byte>>;
  std::shared_ptr<const TensorArray> namedTensors_;
  std::uint64_t namedToken_ = 0;
  std::atomic<std::uint64_t> committed_{0};
  std::atomic<std::uint64_t> progressVersion_{0};  // PublishProgress, written by the I/O thread
  std::atomic<std::uint64_t> progressBytes_{0};
  std::atomic<std::uint64_t> progressTotal_{0};
  std::atomic<bool> progressSending_{false};
  // Some publish since the last send did not vouch for its allocations (PublishOptions::allocationsKept): the next
  // send must not either, or a round that ended before its send (refused, aborted) would hide that publish's frees.
  std::atomic<bool> allocationsDoubted_{true};

  mutable std::mutex mutex_;  // guards pending_, inFlight_, outcome_, stopping_, namedTensors_, namedToken_
  std::condition_variable outcomeReady_;
  std::unique_ptr<Job> pending_;
  bool inFlight_ = false;
  std::optional<PublishOutcome> outcome_;
  bool stopping_ = false;

  // I/O thread only.
  std::unique_ptr<Job> active_;
  std::unique_ptr<bus::PayloadEndpoint> payload_;  // the channel and bucket plan, reused round after round
  bus::Digest holdingsSent_{};                     // the holdings the coordinator has from this registration
  std::uint64_t manifestSentEpoch_ = 0;            // the coordinator epoch that has our manifest
  std::thread io_;
};

}  // namespace wsync::trainer_agent
