#include "wsync/worker_agent/worker_agent.hpp"

#include "binding_ledger.hpp"
#include "round_handler.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/log.hpp"

namespace wsync::worker_agent {

namespace detail {

void AppliedVersion::wakeWaiters() {
  {
    std::lock_guard lock(mutex_);
    complete_ = load();
  }
  changed_.notify_all();
}

void AppliedVersion::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

VersionWait AppliedVersion::waitFor(std::uint64_t version, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return complete_ >= version || closed_; });
  if (complete_ >= version) return VersionWait::Reached;
  return closed_ ? VersionWait::Stopped : VersionWait::TimedOut;
}

}  // namespace detail

tl::expected<std::unique_ptr<WorkerAgent>, WorkerFailure> WorkerAgent::start(WorkerOptions options, PauseHooks hooks) {
  if (!hooks.pause || !hooks.resume) {
    return bus::fail(WorkerError::InvalidOptions, "the pause and resume hooks are required");
  }
  if (options.registrationTimeout.count() <= 0) {
    return bus::fail(WorkerError::InvalidOptions, "the registration timeout must be positive");
  }
  std::unique_ptr<WorkerAgent> agent(new WorkerAgent());
  agent->agentId_ = options.agentId;
  // Before registering: a worker refused here never appears on the bus.
  auto bindings = std::make_shared<const WorkerBindings>(std::move(options.bindings));
  auto claim = detail::BindingLedger::process().claim(options.agentId, bindings);
  if (!claim) return tl::unexpected(std::move(claim.error()));
  agent->bindingClaim_ = std::move(*claim);
  log::setAgent(options.agentId);

  bus::SessionOptions session;
  session.bus = options.bus;
  session.transport = options.transport;
  session.curve = options.curve;
  session.agentId = options.agentId;
  session.role = msg::Role::Worker;
  session.requestedRank = options.requestedRank;
  session.channels.clear();
  for (const msg::ChannelKind kind : bus::buildChannels()) {
    const bool device = bus::channelMemory(kind) == bus::TensorMemory::Device;
    if (device == (options.bindingMemory == BindingMemory::Device)) session.channels.push_back(kind);
  }
  if (session.channels.empty()) {
    return bus::fail(WorkerError::InvalidOptions,
                     "device bindings need the GPU channels, and this build of wsync has none (built without CUDA)");
  }
  session.registrationTimeout = options.registrationTimeout;
  session.link = options.link;
  // A worker that binds slices says so in every hello: the coordinator plans every round with its bindings.
  if (auto regions = bindings->regionBindings()) {
    session.bindings = std::make_shared<const bus::ReceiverBindings>(std::move(*regions));
  }
  auto opened = bus::AgentSession::open(agent->context_, std::move(session));
  if (!opened) {
    const auto code = opened.error().code == bus::SessionError::InvalidOptions ? WorkerError::InvalidOptions
                                                                               : WorkerError::Registration;
    return bus::fail(code, opened.error().describe());
  }
  agent->session_ = std::move(*opened);
  // The bound buffers start as what the engine loaded; nothing this agent applied yet.
  auto registration = agent->session_->registerAgent(0);
  if (!registration) return bus::fail(WorkerError::Registration, registration.error().describe());

  agent->rounds_ = std::make_unique<detail::RoundHandler>(*agent->session_, std::move(bindings), std::move(hooks),
                                                          options.faultHook, agent->appliedVersion_, agent->rank_,
                                                          options.bindingMemory, options.cudaDevice);
  agent->rounds_->attach();
  agent->ioThread_ = std::thread([raw = agent.get()] { raw->run(); });
  return agent;
}

WorkerAgent::~WorkerAgent() { stop(); }

void WorkerAgent::stop() {
  std::call_once(stopOnce_, [this] {
    stopping_.store(true, std::memory_order_release);
    appliedVersion_.close();  // waiters return now, not after the I/O thread's last slice
    if (ioThread_.joinable()) ioThread_.join();
    if (session_) session_->goodbye("worker stopping");
    if (bindingClaim_) bindingClaim_->release();  // nothing of this worker writes them any more
  });
}

std::uint64_t WorkerAgent::committedVersion() const { return rounds_->committedVersion(); }

bus::PauseState WorkerAgent::pauseRequested() const { return rounds_->pauseRequested(); }

WorkerCounters WorkerAgent::counters() const { return rounds_->counters(); }

void WorkerAgent::run() {
  std::string lastFailure;
  while (!stopping_.load(std::memory_order_acquire)) {
    auto delivery = session_->next(kIoSlice);
    if (!delivery) {
      // A socket failure persists; say so once per kind, not once per slice.
      const std::string failure = delivery.error().describe();
      if (failure != lastFailure) {
        log::error("{}", failure);
        lastFailure = failure;
      }
      std::this_thread::sleep_for(kIoSlice);
      continue;
    }
    lastFailure.clear();
    if (delivery->linkLost) rounds_->linkLost();
    if (delivery->reregistered) rounds_->reregistered();
    if (delivery->message) rounds_->handle(*delivery->message);
    rounds_->checkRoundDeadline();
  }
}

}  // namespace wsync::worker_agent
