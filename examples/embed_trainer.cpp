// Embedding the trainer agent: publish each optimizer step's weights and learn whether every worker took them.
// Build: link wsync::trainer_agent. Run: wsync-coordinator --bus rl & ./embed_trainer rl
#include <cstdio>
#include <vector>

#include <wsync/trainer_agent/trainer_agent.hpp>

int main(int argc, char** argv) {
  using namespace wsync;
  auto agent = trainer_agent::TrainerAgent::start({.bus = argc > 1 ? argv[1] : "rl", .agentId = "trainer-0"});
  if (!agent) return std::fprintf(stderr, "%s\n", agent.error().describe().c_str()), 1;
  trainer_agent::TrainerAgent& trainer = **agent;

  // The model: ordered (name, dtype, shape); here two host tensors standing in for the policy's parameters.
  std::vector<std::byte> embed(1024 * 64 * 2), head(64 * 2);
  const std::vector<std::span<const std::byte>> tensors{embed, head};
  if (!trainer.declareManifest(
          {{"embed.weight", msg::DType::BF16, {1024, 64}}, {"head.bias", msg::DType::BF16, {64}}})) {
    return 1;
  }

  for (std::uint64_t step = trainer.committedVersion() + 1; step <= 3; ++step) {
    embed[step] = std::byte{42};  // the optimizer step
    if (auto published = trainer.publish(step, tensors, {.label = "step-" + std::to_string(step)}); !published) {
      return std::fprintf(stderr, "%s\n", published.error().describe().c_str()), 1;
    }
    // Blocks until every worker received and verified it and it is committed (each worker applies it at once),
    // or until the round was aborted (the reason says why).
    const auto outcome = trainer.waitOutcome();
    std::printf("version %llu: %s %s\n", static_cast<unsigned long long>(step),
                std::string(toString(outcome->kind)).c_str(), outcome->detail.c_str());
  }
  return 0;
}
