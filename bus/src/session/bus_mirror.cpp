#include "wsync/bus/session/bus_mirror.hpp"

#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/topics.hpp"

namespace wsync::bus {

tl::expected<std::shared_ptr<BusMirror>, TransportFailure> BusMirror::start(zmq::context_t& context,
                                                                            const std::string& eventsEndpoint,
                                                                            const std::optional<CurveClient>& curve) {
  auto subscriber = EventSubscriber::connect(context, eventsEndpoint, {std::string(topics::kBus) + "beat"}, curve);
  if (!subscriber) return tl::unexpected(subscriber.error());
  std::shared_ptr<BusMirror> mirror(new BusMirror());
  mirror->thread_ = std::thread(
      [raw = mirror.get(), subscriber = std::move(*subscriber)]() mutable { raw->run(std::move(subscriber)); });
  return mirror;
}

BusMirror::~BusMirror() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void BusMirror::seed(std::uint64_t epoch, std::uint64_t committedVersion, const PauseState& pause) {
  // The epoch first: a reader that sees the new words also sees the epoch they belong to.
  epoch_.store(epoch, std::memory_order_release);
  // Versions never go back within a bus; a seed older than a beat already heard must not undo it.
  std::uint64_t known = committed_.load(std::memory_order_acquire);
  while (committedVersion > known && !committed_.compare_exchange_weak(known, committedVersion)) {}
  pauseWord_.store(packPause(pause), std::memory_order_release);
  lastBeatMs_.store(monotonicMillis(), std::memory_order_release);
}

PauseState BusMirror::pauseState() const { return unpackPause(pauseWord_.load(std::memory_order_acquire)); }

std::optional<RoundState> BusMirror::roundState(std::uint64_t epoch) const {
  const std::uint64_t word = roundWord_.load(std::memory_order_acquire);
  if (epoch_.load(std::memory_order_acquire) != epoch) return std::nullopt;
  return unpackRound(word);
}

bool BusMirror::coordinatorAlive(std::uint64_t epoch, std::chrono::milliseconds timeout) const {
  if (epoch_.load(std::memory_order_acquire) != epoch) return false;
  const std::uint64_t last = lastBeatMs_.load(std::memory_order_acquire);
  const std::uint64_t now = monotonicMillis();
  return now < last || now - last <= static_cast<std::uint64_t>(timeout.count());
}

void BusMirror::run(EventSubscriber subscriber) {
  while (!stop_.load(std::memory_order_acquire)) {
    auto received = subscriber.receive(kMirrorStopPoll);
    if (!received) {
      if (received.error().code == TransportError::Interrupted) continue;
      log::error("the bus mirror stopped: {}", received.error().describe());
      return;
    }
    if (!*received || !(*received)->message) continue;  // nothing yet, or a malformed event (counted)
    const Message& message = *(*received)->message;
    const auto* beat = message.as<msg::CoordinatorBeat>();
    if (beat == nullptr) continue;
    epoch_.store(message.epoch(), std::memory_order_release);
    roundWord_.store(packRound(RoundState{beat->phase(), beat->round()}), std::memory_order_release);
    pauseWord_.store(packPause(PauseState{beat->paused(), beat->pause_mode(), beat->pause_round()}),
                     std::memory_order_release);
    committed_.store(beat->committed_version(), std::memory_order_release);
    lastBeatMs_.store(monotonicMillis(), std::memory_order_release);
    beats_.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace wsync::bus
