#include "wsync/trainer_agent/trainer_agent.hpp"

#include <csignal>

#include "wsync/bus/channel/payload_endpoint.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/region_message.hpp"

namespace wsync::trainer_agent {

namespace {

using Clock = std::chrono::steady_clock;

// How long the I/O thread waits for a message before it looks at its own queue again; wake() cuts it short,
// so this only bounds how late a missed wake would be noticed.
constexpr std::chrono::milliseconds kIoSlice{100};
// The sender's own deadline for a transfer. The coordinator aborts a stuck transfer much sooner (its transfer
// timeout) through the arena's abort word; this only guards against a coordinator that vanished mid-transfer.
constexpr std::chrono::minutes kSendDeadline{10};
// A pause fault waits at most this long for the coordinator to reach its pause phase.
constexpr std::chrono::seconds kFaultPhaseWait{5};
// A question about a version's fate is asked again this often until answered: the coordinator answers at once, so
// only a lost connection (handled on its own) leaves it unanswered.
constexpr std::chrono::milliseconds kFateQueryRepeat{1000};

}  // namespace

std::string_view toString(TrainerError error) {
  switch (error) {
    case TrainerError::Session:
      return "session";
    case TrainerError::InvalidManifest:
      return "invalid manifest";
    case TrainerError::InvalidHoldings:
      return "invalid holdings";
    case TrainerError::NoManifest:
      return "no manifest declared";
    case TrainerError::BufferMismatch:
      return "buffer mismatch";
    case TrainerError::Busy:
      return "a version is in flight";
    case TrainerError::Stopped:
      return "stopped";
  }
  return "unknown trainer error";
}

std::string_view toString(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::Committed:
      return "committed";
    case OutcomeKind::Aborted:
      return "aborted";
    case OutcomeKind::Refused:
      return "refused";
  }
  return "unknown";
}

// One version in flight. Owned by the I/O thread once taken from the queue.
struct TrainerAgent::Job {
  std::uint64_t version = 0;
  std::shared_ptr<const TensorArray> tensors;  // never null
  std::shared_ptr<const Holdings> holdings;    // a sharded trainer's rank; null: the whole model
  PublishOptions options;
  bool began = false;
  bool manifestResent = false;
  std::uint64_t beginSeq = 0;
  std::uint64_t round = 0;
  Clock::time_point beganAt{};
  Clock::time_point planAt{};
  std::chrono::nanoseconds sending{0};
  // By then the round's outcome must have arrived (Registration::roundBound), or the connection is given up.
  Clock::time_point outcomeDeadline{};
  // The connection was lost after BeginUpdate left: the outcome comes from a VersionQuery once registered again.
  bool fateUnknown = false;
  Clock::time_point nextFateQuery{};
};

tl::expected<std::unique_ptr<TrainerAgent>, TrainerFailure> TrainerAgent::start(TrainerOptions options) {
  // What the channel needs before the hello advertises it (the tcp channel's listener), opened for the agent's life.
  auto listeners = bus::openChannelListeners(std::span(&options.channel, 1), options.transport);
  if (!listeners) return bus::fail(TrainerError::Session, "payload channel: " + listeners.error().describe());
  auto context = std::make_unique<zmq::context_t>(1);
  bus::SessionOptions sessionOptions;
  sessionOptions.bus = options.bus;
  sessionOptions.transport = options.transport;
  sessionOptions.curve = options.curve;
  sessionOptions.agentId = options.agentId;
  sessionOptions.role = msg::Role::Trainer;
  sessionOptions.requestedRank = options.requestedRank;
  sessionOptions.channels = {options.channel};
  sessionOptions.channelContacts = (*listeners)->contacts();
  sessionOptions.link = options.link;
  auto session = bus::AgentSession::open(*context, sessionOptions);
  if (!session) return bus::fail(TrainerError::Session, session.error().describe());
  auto registration = (*session)->registerAgent(0);
  if (!registration) return bus::fail(TrainerError::Session, registration.error().describe());
  return std::unique_ptr<TrainerAgent>(
      new TrainerAgent(std::move(options), std::move(context), std::move(*session), std::move(*listeners)));
}

TrainerAgent::TrainerAgent(TrainerOptions options, std::unique_ptr<zmq::context_t> context,
                           std::unique_ptr<bus::AgentSession> session, std::shared_ptr<bus::ChannelListeners> listeners)
    : options_(std::move(options)),
      context_(std::move(context)),
      session_(std::move(session)),
      payload_(std::make_unique<bus::PayloadEndpoint>(*session_, options_.cudaDevice, kSendDeadline, bus::openChannel,
                                                      options_.faultHook.get(), std::move(listeners))) {
  rank_ = session_->registration().rank;
  committed_.store(session_->registration().committedVersion, std::memory_order_release);
  session_->setAppliedVersion(session_->registration().committedVersion);
  log::setAgent(options_.agentId);
  log::setVersion(session_->registration().committedVersion);
  io_ = std::thread([this] { ioLoop(); });
}

TrainerAgent::~TrainerAgent() { stop(); }

void TrainerAgent::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      if (io_.joinable()) io_.join();
      return;
    }
    stopping_ = true;
  }
  session_->wake();
  if (io_.joinable()) io_.join();
}

std::uint64_t TrainerAgent::committedVersion() const { return committed_.load(std::memory_order_acquire); }

tl::expected<void, TrainerFailure> TrainerAgent::declareManifest(std::vector<bus::TensorSpec> tensors) {
  std::lock_guard lock(mutex_);
  if (inFlight_) return bus::fail(TrainerError::Busy, "declare the manifest between versions");
  auto manifest = bus::Manifest::create(std::move(tensors));
  if (!manifest) return bus::fail(TrainerError::InvalidManifest, manifest.error().describe());
  manifest_ = std::move(*manifest);
  holdings_.reset();      // of the manifest it replaces
  namedTensors_.reset();  // checked against the manifest it replaces
  namedToken_ = 0;
  return {};
}

tl::expected<void, TrainerFailure> TrainerAgent::declareHoldings(bus::SourceHoldings holdings, std::uint32_t rank,
                                                                 std::uint32_t count) {
  std::lock_guard lock(mutex_);
  if (inFlight_) return bus::fail(TrainerError::Busy, "declare the holdings between versions");
  if (!manifest_) return bus::fail(TrainerError::NoManifest, "call declareManifest() first");
  if (count == 0 || count > bus::kMaxSources || rank >= count) {
    return bus::fail(TrainerError::InvalidHoldings, "rank " + std::to_string(rank) + " of " + std::to_string(count) +
                                                        " ranks: a sharded trainer has 1 to " +
                                                        std::to_string(bus::kMaxSources) + " ranks, numbered from 0");
  }
  if (auto checked = bus::checkHoldings(*manifest_, holdings, "trainer rank " + std::to_string(rank)); !checked) {
    return bus::fail(TrainerError::InvalidHoldings, checked.error().describe());
  }
  const bus::Digest digest = bus::digestOf(holdings);
  holdings_ = std::make_shared<const Holdings>(Holdings{std::move(holdings), digest, rank, count});
  namedTensors_.reset();  // checked against the manifest's tensors, not these regions
  namedToken_ = 0;
  return {};
}

tl::expected<void, TrainerFailure> TrainerAgent::publish(std::uint64_t version,
                                                         std::span<const std::span<const std::byte>> tensors,
                                                         PublishOptions options) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return bus::fail(TrainerError::Stopped, "the agent is stopping");
    if (!manifest_) return bus::fail(TrainerError::NoManifest, "call declareManifest() first");
    if (inFlight_) return bus::fail(TrainerError::Busy, "wait for the outcome of the version in flight");
    auto job = std::make_unique<Job>();
    job->version = version;
    if (options.layoutToken != 0 && options.layoutToken == namedToken_) {
      job->tensors = namedTensors_;  // the caller's word: the array checked and kept when it named it first
    } else {
      if (auto checked = checkBuffers(tensors); !checked) return tl::unexpected(std::move(checked.error()));
      job->tensors = std::make_shared<const TensorArray>(tensors.begin(), tensors.end());
      if (options.layoutToken != 0) {
        namedTensors_ = job->tensors;
        namedToken_ = options.layoutToken;
      }
    }
    if (!options.allocationsKept) allocationsDoubted_.store(true, std::memory_order_relaxed);
    job->holdings = holdings_;
    job->options = std::move(options);
    pending_ = std::move(job);
    inFlight_ = true;
    outcome_.reset();
  }
  session_->wake();
  return {};
}

tl::expected<void, TrainerFailure> TrainerAgent::checkBuffers(
    std::span<const std::span<const std::byte>> tensors) const {
  if (holdings_ != nullptr) {
    const auto& regions = holdings_->holdings.regions;
    if (tensors.size() != regions.size()) {
      return bus::fail(TrainerError::BufferMismatch, std::to_string(tensors.size()) + " buffers for holdings of " +
                                                         std::to_string(regions.size()) + " regions");
    }
    for (std::size_t index = 0; index < tensors.size(); ++index) {
      const bus::TensorSpec& spec = manifest_->tensors()[regions[index].tensor];
      const std::uint64_t bytes = bus::volume(regions[index].box) * bus::elementBytes(spec.dtype);
      if (tensors[index].size() != bytes) {
        return bus::fail(TrainerError::BufferMismatch, "region " + std::to_string(index) + " (tensor '" + spec.name +
                                                           "' " + bus::format(regions[index].box) + "): buffer of " +
                                                           std::to_string(tensors[index].size()) +
                                                           " bytes, the region has " + std::to_string(bytes));
      }
    }
    return {};
  }
  if (tensors.size() != manifest_->size()) {
    return bus::fail(TrainerError::BufferMismatch, std::to_string(tensors.size()) + " buffers for a manifest of " +
                                                       std::to_string(manifest_->size()) + " tensors");
  }
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    if (tensors[index].size() != manifest_->tensorBytes(index)) {
      return bus::fail(TrainerError::BufferMismatch, "tensor '" + manifest_->tensors()[index].name + "': buffer of " +
                                                         std::to_string(tensors[index].size()) +
                                                         " bytes, the manifest says " +
                                                         std::to_string(manifest_->tensorBytes(index)));
    }
  }
  return {};
}

bool TrainerAgent::stopped() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

PublishProgress TrainerAgent::progress() const {
  return PublishProgress{.version = progressVersion_.load(std::memory_order_relaxed),
                         .bytesSent = progressBytes_.load(std::memory_order_relaxed),
                         .bytesTotal = progressTotal_.load(std::memory_order_relaxed),
                         .sending = progressSending_.load(std::memory_order_acquire)};
}

std::optional<PublishOutcome> TrainerAgent::pollOutcome() { return waitOutcome(std::chrono::milliseconds(0)); }

std::optional<PublishOutcome> TrainerAgent::waitOutcome(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  outcomeReady_.wait_for(lock, timeout, [&] { return outcome_.has_value() || stopping_; });
  return outcome_;
}

PublishOutcome TrainerAgent::outcomeOf(OutcomeKind kind) const {
  PublishOutcome outcome;
  outcome.kind = kind;
  outcome.version = active_->version;
  outcome.round = active_->round;
  const auto now = Clock::now();
  if (active_->began) outcome.total = now - active_->beganAt;
  if (active_->planAt != Clock::time_point{}) outcome.untilPlan = active_->planAt - active_->beganAt;
  outcome.sending = active_->sending;
  return outcome;
}

void TrainerAgent::finish(PublishOutcome outcome) {
  active_.reset();
  std::lock_guard lock(mutex_);
  outcome_ = std::move(outcome);
  inFlight_ = false;
  outcomeReady_.notify_all();
}

void TrainerAgent::noteCommitted(std::uint64_t version) {
  // Versions only go up: an answer that arrived late never lowers what we know.
  if (version <= committed_.load(std::memory_order_acquire)) return;
  committed_.store(version, std::memory_order_release);
  session_->setAppliedVersion(version);
  log::setVersion(version);
}

void TrainerAgent::linkLost() {
  // Whatever the coordinator does with our round now, we can no longer hear it on this connection: the channel of
  // the old registration goes, and the version's fate is asked once registered again.
  payload_->reset();
  if (active_ && active_->began && !active_->fateUnknown) {
    active_->fateUnknown = true;
    log::warn("version {}: lost the coordinator mid-round; its outcome will be asked once registered again",
              active_->version);
  }
}

void TrainerAgent::reregistered() {
  // Perhaps a new coordinator: it may have neither our manifest nor our channel.
  noteCommitted(session_->registration().committedVersion);
  payload_->reset();
  manifestSentEpoch_ = 0;
  holdingsSent_ = bus::Digest{};
  if (active_ && active_->began) {
    active_->fateUnknown = true;
    askFate();
  }
}

void TrainerAgent::askFate() {
  bus::MessageBuilder builder;
  (void)session_->send(builder, msg::CreateVersionQuery(builder.fbb(), active_->version));
  active_->nextFateQuery = Clock::now() + kFateQueryRepeat;
}

void TrainerAgent::handleFate(const msg::VersionReport& report) {
  noteCommitted(report.committed_version());
  if (!active_ || !active_->fateUnknown || report.version() != active_->version) return;
  PublishOutcome outcome;
  switch (report.fate()) {
    case msg::VersionFate::Committed:
      noteCommitted(report.version());
      outcome = outcomeOf(OutcomeKind::Committed);
      break;
    case msg::VersionFate::InProgress:
      // Another trainer's round of the same version (ours ended when our registration did): ask again later.
      return;
    case msg::VersionFate::Superseded:
      outcome = outcomeOf(OutcomeKind::Aborted);
      outcome.reason = msg::AbortReason::VersionNotIncreasing;
      break;
    case msg::VersionFate::Aborted:
    case msg::VersionFate::NotCommitted:
    case msg::VersionFate::Unknown:
      outcome = outcomeOf(OutcomeKind::Aborted);
      outcome.reason = report.reason() == msg::AbortReason::None ? msg::AbortReason::Lost : report.reason();
      break;
  }
  if (report.round() != 0) outcome.round = report.round();
  outcome.detail =
      "the coordinator says, after the connection was lost: " + std::string(msg::EnumNameVersionFate(report.fate())) +
      (report.detail() != nullptr && report.detail()->size() != 0 ? ": " + report.detail()->str() : std::string());
  log::info("version {}: {}", active_->version, outcome.detail);
  finish(std::move(outcome));
}

void TrainerAgent::checkOutcomeDeadline() {
  if (!active_ || !active_->began || active_->fateUnknown) return;
  if (Clock::now() < active_->outcomeDeadline) return;
  // The coordinator ends every round within its phase timeouts: an outcome this late was lost with a message, or
  // the coordinator is stuck. A new connection and the version's fate settle it either way.
  session_->restartConnection(
      "version " + std::to_string(active_->version) + ": no outcome within " +
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - active_->beganAt).count()) +
      " ms, longer than its round can last");
}

void TrainerAgent::ioLoop() {
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      if (!active_ && pending_) active_ = std::move(pending_);
    }
    if (active_ && !active_->began && session_->registered()) beginRound();
    checkOutcomeDeadline();
    if (active_ && active_->fateUnknown && session_->registered() && Clock::now() >= active_->nextFateQuery) {
      askFate();
    }
    auto delivery = session_->next(kIoSlice);
    if (!delivery) {
      log::error("{}", delivery.error().describe());
      std::this_thread::sleep_for(kIoSlice);
      continue;
    }
    if (delivery->linkLost) linkLost();
    if (delivery->reregistered) reregistered();
    if (delivery->message) handle(*delivery->message);
  }
  if (active_) {
    PublishOutcome outcome = outcomeOf(OutcomeKind::Aborted);
    outcome.reason = msg::AbortReason::Requested;
    outcome.detail = "the trainer agent stopped";
    if (active_->began && !active_->fateUnknown) {
      bus::MessageBuilder builder;
      auto& fbb = builder.fbb();
      (void)session_->send(builder, msg::CreateAbort(fbb, active_->round, active_->version, msg::AbortReason::Requested,
                                                     fbb.CreateString("trainer stopped")));
    }
    finish(std::move(outcome));
  }
  session_->goodbye("trainer agent stopped");
}

void TrainerAgent::beginRound() {
  Job& job = *active_;
  const bus::Manifest& manifest = *manifest_;
  const bool withManifest = manifestSentEpoch_ != session_->registration().epoch || job.manifestResent;
  bus::MessageBuilder builder(withManifest ? 64 * 1024 : 512);
  auto& fbb = builder.fbb();
  const auto manifestOffset = withManifest ? manifest.toMessage(fbb) : flatbuffers::Offset<msg::Manifest>();
  const msg::Digest128 digest = bus::toMessage(manifest.digest());
  // A rank's holdings go with its first round on this registration, and again when they change or the coordinator
  // lost them (it refuses as UnknownManifest, and both are sent again).
  const Holdings* holdings = job.holdings.get();
  const bool withHoldings = holdings != nullptr && (withManifest || holdingsSent_ != holdings->digest);
  const msg::Digest128 holdingsDigest = bus::toMessage(holdings != nullptr ? holdings->digest : bus::Digest{});
  const auto holdingsOffset =
      withHoldings ? bus::toMessage(fbb, holdings->holdings, manifest.digest()) : flatbuffers::Offset<msg::Holdings>();
  const auto begin = msg::CreateBeginUpdate(
      fbb, job.version, fbb.CreateString(job.options.label), &digest, manifestOffset, options_.channel,
      job.options.pauseMode, manifest.totalBytes(), holdings != nullptr ? holdings->rank : 0,
      holdings != nullptr ? holdings->count : 1, holdings != nullptr ? &holdingsDigest : nullptr, holdingsOffset);
  if (holdings != nullptr) payload_->declarations().addOwn(holdings->holdings, manifest.digest());
  job.beganAt = Clock::now();
  auto sent = session_->send(builder, begin);
  if (!sent) {
    PublishOutcome outcome = outcomeOf(OutcomeKind::Refused);
    outcome.detail = "cannot reach the coordinator: " + sent.error().describe();
    finish(std::move(outcome));
    return;
  }
  job.began = true;
  job.beginSeq = session_->lastRequestSeq();
  // A rank waits for the others to begin too, for up to the coordinator's sources timeout.
  job.outcomeDeadline = job.beganAt + session_->registration().roundBound(manifest.totalBytes()) +
                        (holdings != nullptr ? session_->registration().sourcesTimeout : std::chrono::milliseconds(0));
  if (withManifest) manifestSentEpoch_ = session_->registration().epoch;
  if (withHoldings) holdingsSent_ = holdings->digest;
  strike(bus::FaultPoint::Begin, job.version);
  strikeDuringPause(job.version);
}

void TrainerAgent::strike(bus::FaultPoint point, std::uint64_t version) {
  if (const auto outage = bus::reachFault(options_.faultHook.get(), point, version)) session_->dropConnection(*outage);
}

void TrainerAgent::strikeDuringPause(std::uint64_t version) {
  if (!options_.faultHook || !options_.faultHook->armedAt(bus::FaultPoint::Pause, version)) return;
  // The trainer takes no part in the pause: its fault strikes once the control block shows the coordinator waiting
  // for the workers' acks. A test widens that phase with a slow worker (a delay fault at the worker's begin).
  const auto deadline = Clock::now() + kFaultPhaseWait;
  while (Clock::now() < deadline && session_->registered() &&
         session_->slot().roundState().phase != msg::RoundPhase::Pause) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  strike(bus::FaultPoint::Pause, version);
}

void TrainerAgent::handle(const bus::Message& message) {
  if (const auto* error = message.as<msg::Error>()) {
    noteCommitted(error->committed_version());
    const std::string detail = std::string(msg::EnumNameErrorCode(error->code())) + ": " +
                               (error->detail() ? error->detail()->str() : std::string());
    if (!active_ || !active_->began || active_->fateUnknown || error->in_reply_to() != active_->beginSeq) {
      log::warn("coordinator: {}", detail);
      return;
    }
    if (error->code() == msg::ErrorCode::UnknownManifest && !active_->manifestResent) {
      active_->manifestResent = true;  // the coordinator dropped it from its cache: send it again, once
      active_->began = false;
      holdingsSent_ = bus::Digest{};  // or the holdings: both go again
      return;
    }
    PublishOutcome outcome = outcomeOf(OutcomeKind::Refused);
    outcome.refusal = error->code();
    outcome.detail = detail;
    finish(std::move(outcome));
    return;
  }
  if (const auto* report = message.as<msg::VersionReport>()) {
    handleFate(*report);
    return;
  }
  // A region round's declarations come before its plan, whatever this agent is doing.
  if (const auto* holdings = message.as<msg::Holdings>()) {
    if (auto added = payload_->declarations().add(*holdings); !added) {
      log::warn("refused holdings the coordinator sent: {}", added.error().describe());
    }
    return;
  }
  if (const auto* bindings = message.as<msg::Bindings>()) {
    if (auto added = payload_->declarations().add(*bindings); !added) {
      log::warn("refused bindings the coordinator sent: {}", added.error().describe());
    }
    return;
  }
  if (!active_ || !active_->began || active_->fateUnknown) return;
  if (const auto* plan = message.as<msg::TransferPlan>()) {
    if (plan->version() != active_->version || plan->receiver() != -1) return;
    active_->round = plan->round();
    active_->planAt = Clock::now();
    if (plan->regions()) {
      sendRegions(*plan);
    } else {
      sendPayload(*plan);
    }
    return;
  }
  if (const auto* commit = message.as<msg::Commit>()) {
    if (commit->version() != active_->version) return;
    strike(bus::FaultPoint::Commit, commit->version());
    noteCommitted(commit->version());
    PublishOutcome outcome = outcomeOf(OutcomeKind::Committed);
    outcome.round = commit->round();
    outcome.bytes = commit->bytes();
    if (commit->digest()) outcome.digest = bus::fromMessage(*commit->digest());
    finish(std::move(outcome));
    // The trainer has no part in a resume: its "resume" point is right after it learnt of the commit, while the
    // coordinator resumes the workers.
    strike(bus::FaultPoint::Resume, commit->version());
    return;
  }
  if (const auto* abort = message.as<msg::Abort>()) {
    if (abort->version() != active_->version) return;
    PublishOutcome outcome = outcomeOf(OutcomeKind::Aborted);
    outcome.round = abort->round();
    outcome.reason = abort->reason();
    outcome.detail = abort->detail() ? abort->detail()->str() : std::string();
    finish(std::move(outcome));
  }
}

template <typename Send>
auto TrainerAgent::sendTimed(std::uint64_t total, Send&& send) {
  Job& job = *active_;
  progressBytes_.store(0, std::memory_order_relaxed);
  progressTotal_.store(total, std::memory_order_relaxed);
  progressVersion_.store(job.version, std::memory_order_relaxed);
  progressSending_.store(true, std::memory_order_release);
  const auto started = Clock::now();
  auto sent = send(bus::TransferProgress([this, version = job.version](std::uint64_t bytes) {
    progressBytes_.store(bytes, std::memory_order_relaxed);
    if (bytes > 0) strike(bus::FaultPoint::Transfer, version);  // after the first bucket
  }));
  job.sending = Clock::now() - started;
  progressSending_.store(false, std::memory_order_release);
  if (session_->registered()) session_->slot().setPhase(bus::AgentPhase::Idle);
  return sent;
}

void TrainerAgent::sendPayload(const msg::TransferPlan& plan) {
  Job& job = *active_;
  bus::MessageBuilder builder;
  auto reply = [&](bool ok, std::uint64_t bytes, const bus::Digest& digest, const bus::PayloadFailure& failure) {
    builder.reset();
    auto& fbb = builder.fbb();
    const msg::Digest128 wire = bus::toMessage(digest);
    (void)session_->send(
        builder, msg::CreateUpdateDone(fbb, plan.round(), plan.version(), ok, bytes, &wire,
                                       ok ? msg::AbortReason::None : failure.reason, fbb.CreateString(failure.detail)));
  };
  auto transfer = payload_->prepare(plan, *manifest_, std::nullopt);
  if (!transfer) {
    reply(false, 0, {}, transfer.error());
    return;
  }
  const bool allocationsKept = !allocationsDoubted_.exchange(false, std::memory_order_relaxed);
  auto sent = sendTimed(manifest_->totalBytes(), [&](const bus::TransferProgress& progress) {
    return payload_->send(*transfer, *job.tensors, allocationsKept, job.options.layoutToken, progress);
  });
  if (!sent) {
    reply(false, 0, {}, sent.error());
    return;
  }
  reply(true, sent->bytes, sent->digest, bus::PayloadFailure{});
  strike(bus::FaultPoint::Verify, job.version);
}

void TrainerAgent::sendRegions(const msg::TransferPlan& plan) {
  Job& job = *active_;
  bus::MessageBuilder builder;
  auto reply = [&](const bus::RegionTransferResult& pairs, const bus::PayloadFailure* failure) {
    builder.reset();
    auto& fbb = builder.fbb();
    std::uint64_t bytes = 0;
    for (const bus::PairResult& pair : pairs) bytes += pair.bytes;
    const auto entries = bus::toMessage(fbb, pairs);
    (void)session_->send(builder,
                         msg::CreateUpdateDone(fbb, plan.round(), plan.version(), failure == nullptr, bytes, nullptr,
                                               failure != nullptr ? failure->reason : msg::AbortReason::None,
                                               failure != nullptr ? fbb.CreateString(failure->detail) : 0, entries));
  };
  // A trainer that declared no holdings holds the whole model: its buffers are the manifest's tensors, which are the
  // regions of its whole holdings in the same order.
  const std::int32_t rank = job.holdings != nullptr ? static_cast<std::int32_t>(job.holdings->rank) : 0;
  if (plan.source() != rank) {
    const bus::PayloadFailure failure{msg::AbortReason::AgentRefused, bus::FailureCause::Local,
                                      "the plan makes this trainer source " + std::to_string(plan.source()) +
                                          ", and it is rank " + std::to_string(rank)};
    reply({}, &failure);
    return;
  }
  if (job.holdings == nullptr) payload_->declarations().addOwn(bus::wholeHoldings(*manifest_), manifest_->digest());
  auto transfer = payload_->prepareRegions(plan, *manifest_, std::nullopt);
  if (!transfer) {
    reply({}, &transfer.error());
    return;
  }
  const std::uint64_t total = transfer->regions->bytesRead(static_cast<std::uint32_t>(plan.source()));
  auto sent = sendTimed(total, [&](const bus::TransferProgress& progress) {
    return payload_->sendRegions(*transfer, *job.tensors, progress);
  });
  if (!sent) {
    reply({}, &sent.error());
    return;
  }
  reply(*sent, nullptr);
  strike(bus::FaultPoint::Verify, job.version);
}

}  // namespace wsync::trainer_agent
