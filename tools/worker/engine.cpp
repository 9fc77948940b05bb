#include "engine.hpp"

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "wsync/bus/core/log.hpp"

namespace wsync::worker_app {

Engine::Engine(EngineOptions options, const ModelWeights& weights, worker_agent::PauseGate& gate,
               std::function<std::uint64_t()> appliedVersion, const std::atomic<bool>& stopRequested)
    : options_(std::move(options)),
      weights_(weights),
      gate_(gate),
      appliedVersion_(std::move(appliedVersion)),
      stopRequested_(stopRequested) {}

bool Engine::admitting() const {
  if (options_.requests != 0 && admitted_ >= options_.requests) return false;
  return !(options_.exitAfterVersion && appliedVersion_() >= *options_.exitAfterVersion);
}

bool Engine::finished(std::size_t inFlight) const {
  if (inFlight != 0) return false;
  if (options_.exitAfterVersion) return appliedVersion_() >= *options_.exitAfterVersion;
  return options_.requests != 0 && admitted_ >= options_.requests;
}

void Engine::end(Request& request, bool aborted) {
  ++summary_.requestsEnded;
  if (aborted) ++summary_.requestsAborted;
  const auto& spans = request.spans.spans();
  if (auto consistent = worker_agent::checkSpans(spans, request.tokens); !consistent) {
    ++summary_.inconsistentOutputs;
    log::error("request {} has inconsistent version spans: {}", request.id, consistent.error().describe());
  }
  if (outputs_ == nullptr) return;
  nlohmann::ordered_json line{{"request", request.id}, {"tokens", request.tokens}, {"aborted", aborted}};
  auto& list = line["spans"] = nlohmann::ordered_json::array();
  for (const auto& span : spans) list.push_back({span.firstToken, span.version});
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), outputs_);
}

void Engine::endAll(std::vector<Request>& inFlight, bool aborted) {
  for (Request& request : inFlight) end(request, aborted);
  inFlight.clear();
}

void Engine::step(std::vector<Request>& inFlight) {
  if (options_.step.count() > 0) std::this_thread::sleep_for(options_.step);
  // One read for the whole step: versions change only while the engine is parked, never during a step.
  const std::uint64_t version = appliedVersion_();
  for (Request& request : inFlight) {
    summary_.weightChecksum ^= weights_.sample(request.id * 0x9e3779b97f4a7c15ULL + request.tokens);
    request.spans.record(request.tokens, version);
    ++request.tokens;
    ++summary_.tokens;
  }
  std::vector<Request> running;
  running.reserve(inFlight.size());
  for (Request& request : inFlight) {
    if (request.tokens >= options_.tokens) {
      end(request, false);
    } else {
      running.push_back(std::move(request));
    }
  }
  inFlight = std::move(running);
}

tl::expected<EngineSummary, std::string> Engine::run() {
  if (!options_.outputsPath.empty()) {
    outputs_ = std::fopen(options_.outputsPath.c_str(), "w");
    if (outputs_ == nullptr) {
      return tl::unexpected("cannot write outputs to " + options_.outputsPath + ": " + std::strerror(errno));
    }
  }
  std::vector<Request> inFlight;
  while (!stopRequested_.load(std::memory_order_acquire)) {
    if (const auto mode = gate_.requested()) {
      bool parkNow = true;
      switch (*mode) {
        case msg::PauseMode::Abort:
          endAll(inFlight, true);
          break;
        case msg::PauseMode::Keep:
          break;  // frozen as they are; their next tokens carry the new version
        case msg::PauseMode::Wait:
          parkNow = inFlight.empty();
          break;  // drain first, admitting nothing
      }
      if (parkNow) {
        if (!gate_.park()) break;  // closed: the worker is stopping
        continue;
      }
    } else {
      while (inFlight.size() < options_.concurrency && admitting()) inFlight.push_back(Request{admitted_++, 0, {}});
    }
    if (finished(inFlight.size())) break;
    if (inFlight.empty()) {
      // Idle (waiting for the exit version): poll the gate at the step's pace.
      std::this_thread::sleep_for(std::max(options_.step, std::chrono::milliseconds(1)));
      continue;
    }
    step(inFlight);
  }
  endAll(inFlight, true);  // stopped early: what was in flight did not finish
  if (outputs_ != nullptr) {
    const bool failed = std::ferror(outputs_) != 0;
    if (std::fclose(outputs_) != 0 || failed) {
      outputs_ = nullptr;
      return tl::unexpected("writing outputs to " + options_.outputsPath + " failed");
    }
    outputs_ = nullptr;
  }
  return summary_;
}

}  // namespace wsync::worker_app
