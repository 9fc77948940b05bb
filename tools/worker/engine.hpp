#pragma once
// The stand-in inference engine of wsync-worker: a step loop that decodes one token per in-flight request per
// step by reading the weights, tags every token with the applied version through a SpanRecorder, and honours the
// pause modes through a PauseGate (abort: end in-flight requests; wait: drain them; keep: freeze them).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include <tl/expected.hpp>

#include "model_weights.hpp"
#include "wsync/worker_agent/pause_gate.hpp"
#include "wsync/worker_agent/span_recorder.hpp"

namespace wsync::worker_app {

struct EngineOptions {
  std::uint64_t requests = 0;  // 0: endless
  std::uint64_t tokens = 64;   // per request
  std::uint32_t concurrency = 4;
  std::chrono::milliseconds step{5};
  std::string outputsPath;  // JSON lines, one per ended request; empty: none
  // Stop admitting once this version is applied, and end when the in-flight requests are done. With it,
  // `requests` only bounds admission: the engine idles (still pausing and resuming) until the version arrives.
  std::optional<std::uint64_t> exitAfterVersion;
};

struct EngineSummary {
  std::uint64_t requestsEnded = 0;
  std::uint64_t requestsAborted = 0;
  std::uint64_t tokens = 0;
  std::uint64_t inconsistentOutputs = 0;  // outputs whose spans failed checkSpans (a bug if ever non-zero)
  std::uint64_t weightChecksum = 0;       // folds every byte the steps read, so the reads cannot be optimised away
};

class Engine {
 public:
  Engine(EngineOptions options, const ModelWeights& weights, worker_agent::PauseGate& gate,
         std::function<std::uint64_t()> appliedVersion, const std::atomic<bool>& stopRequested);

  // Runs until the requests are done, the exit version is in, `stopRequested` is set or the gate is closed.
  tl::expected<EngineSummary, std::string> run();

 private:
  struct Request {
    std::uint64_t id = 0;
    std::uint64_t tokens = 0;
    worker_agent::SpanRecorder spans;
  };

  bool admitting() const;
  bool finished(std::size_t inFlight) const;
  void step(std::vector<Request>& inFlight);
  void end(Request& request, bool aborted);
  void endAll(std::vector<Request>& inFlight, bool aborted);

  EngineOptions options_;
  const ModelWeights& weights_;
  worker_agent::PauseGate& gate_;
  std::function<std::uint64_t()> appliedVersion_;
  const std::atomic<bool>& stopRequested_;
  std::FILE* outputs_ = nullptr;
  std::uint64_t admitted_ = 0;
  EngineSummary summary_;
};

}  // namespace wsync::worker_app
