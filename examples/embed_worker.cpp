// Embedding the worker agent in an inference engine: bind the weights, let the agent pause and resume the
// engine's step loop, and tag every generated token with the version that produced it.
// Build: link wsync::worker_agent. Run: ./embed_worker rl (with a coordinator and a trainer on bus "rl")
#include <cstdio>
#include <thread>
#include <vector>

#include <wsync/worker_agent/pause_gate.hpp>
#include <wsync/worker_agent/span_recorder.hpp>
#include <wsync/worker_agent/worker_agent.hpp>

int main(int argc, char** argv) {
  using namespace wsync;
  // The engine's weights, bound by name: the agent copies each committed version into them.
  std::vector<std::byte> embed(1024 * 64 * 2), head(64 * 2);
  worker_agent::WorkerOptions options{.bus = argc > 1 ? argv[1] : "rl", .agentId = "worker-0"};
  if (!options.bindings.bind("embed.weight", msg::DType::BF16, {1024, 64}, embed) ||
      !options.bindings.bind("head.bias", msg::DType::BF16, {64}, head)) {
    return 1;
  }
  // The gate parks the step loop while a version is applied (keep mode: in-flight requests continue afterwards).
  worker_agent::PauseGate gate;
  worker_agent::PauseHooks hooks{.pause = [&](msg::PauseMode mode, std::uint64_t) -> worker_agent::PauseResult {
                                   // A hook that cannot pause its engine returns why instead.
                                   if (!gate.pause(mode)) return tl::unexpected(std::string("withdrawn"));
                                   return {};
                                 },
                                 .resume = [&](std::uint64_t) { gate.resume(); },
                                 // The round ended while the engine still drained: it goes back to generating.
                                 .withdraw = [&](std::uint64_t) { gate.withdraw(); }};
  auto agent = worker_agent::WorkerAgent::start(std::move(options), std::move(hooks));
  if (!agent) return std::fprintf(stderr, "%s\n", agent.error().describe().c_str()), 1;

  worker_agent::SpanRecorder spans;  // one per output: (first token index, version)
  for (std::uint64_t token = 0; token < 200; ++token) {
    if (gate.requested()) gate.park();                // between steps: nothing reads the weights while they change
    spans.record(token, (*agent)->appliedVersion());  // one atomic load
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a decode step reading embed and head
  }
  gate.close();  // releases a pause in progress, so that stop() can end the agent
  for (const auto& span : spans.spans()) {
    std::printf("tokens from %llu: version %llu\n", static_cast<unsigned long long>(span.firstToken),
                static_cast<unsigned long long>(span.version));
  }
  return 0;
}
