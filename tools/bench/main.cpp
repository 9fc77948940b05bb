// wsync-bench: wsync measured against raw baselines in the same run, so that machine noise hits both alike.
//
//   wsync-bench bus [--quick] [--out FILE] [--json FILE] ...   control plane and version read (report on stdout)
//
// The agent-* subcommands are hidden: they are the agent processes that `bus` starts from this executable.
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "agent_main.hpp"
#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "interruption.hpp"
#include "latency_benchmark.hpp"
#include "machine_info.hpp"
#include "report.hpp"
#include "version_read.hpp"

namespace wsync::bench {
namespace {

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw BenchFailure("cannot write " + path);
}

int runBusMode(const BusBenchConfig& config) {
  installInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  BusBenchReport report;
  report.config = config;
  report.machine = describeMachine(config.commit);
  report.versionRead = runVersionReadBenchmark(config, std::cerr);
  report.latency = runLatencyBenchmarks(config, std::cerr);
  report.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string markdown = renderMarkdown(report);
  std::cout << markdown << std::flush;
  if (!config.outPath.empty()) {
    writeFile(config.outPath, markdown);
    std::cerr << "report written to " << config.outPath << '\n';
  }
  if (!config.jsonPath.empty()) {
    writeFile(config.jsonPath, renderJson(report));
    std::cerr << "JSON written to " << config.jsonPath << '\n';
  }
  return 0;
}

void addAgentOptions(CLI::App& command, AgentOptions& options) {
  command.add_option("--parent", options.parent)->required();
  command.add_option("--id", options.id)->required();
  command.add_option("--bus-requests", options.busRequests)->required();
  command.add_option("--bus-events", options.busEvents)->required();
  command.add_option("--raw-requests", options.rawRequests)->required();
  command.add_option("--raw-events", options.rawEvents)->required();
}

}  // namespace
}  // namespace wsync::bench

int main(int argc, char** argv) {
  using namespace wsync::bench;
  CLI::App app{"wsync-bench: wsync measured against raw baselines, side by side in the same run"};
  app.require_subcommand(1);

  BusBenchConfig config;
  CLI::App& busMode = *app.add_subcommand(
      "bus", "Control-plane latency through the bus library vs raw ZeroMQ, and the shared-memory version read");
  auto* roundTrips = busMode
                         .add_option("--round-trips", config.roundTrips,
                                     "Measured request/reply round trips per path (bus, raw)")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  auto* iterations = busMode
                         .add_option("--iterations", config.pauseRounds,
                                     "Measured 'publish pause, collect N acks' rounds per path, for each N")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  busMode.add_option("--block", config.block, "Iterations per block; blocks alternate bus and raw")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  busMode.add_option("--agents", config.agentCounts, "Agent process counts N for the fan-out, e.g. 1,8,32")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, kMaxBenchAgents))
      ->capture_default_str();
  auto* versionReads = busMode
                           .add_option("--version-reads", config.versionReads,
                                       "Version reads per timed repetition")
                           ->check(CLI::PositiveNumber)
                           ->capture_default_str();
  busMode.add_flag("--quick", config.quick, "Few iterations, for a demonstration in a few seconds");
  busMode.add_option("--out", config.outPath, "Also write the markdown report to this file");
  busMode.add_option("--json", config.jsonPath, "Write the results as JSON to this file");
  busMode.add_option("--commit", config.commit, "Commit to name in the report (default: git describe)");

  AgentOptions agent;
  // Hidden (empty group): started by `bus`, never by hand.
  CLI::App& roundTripAgent = *app.add_subcommand("agent-roundtrip", "internal: round-trip agent")->group("");
  addAgentOptions(roundTripAgent, agent);
  roundTripAgent.add_option("--iterations", agent.iterations)->required();
  roundTripAgent.add_option("--warmup", agent.warmup)->required();
  roundTripAgent.add_option("--block", agent.block)->required()->check(CLI::PositiveNumber);
  roundTripAgent.add_option("--samples", agent.samplesPath)->required();
  CLI::App& pauseAgent = *app.add_subcommand("agent-pause", "internal: fan-out agent")->group("");
  addAgentOptions(pauseAgent, agent);

  CLI11_PARSE(app, argc, argv);

  if (roundTripAgent.parsed() || pauseAgent.parsed()) {
    // Ctrl-C reaches the whole process group: agents leave stopping to the benchmark, which reports the
    // interruption instead of a dead agent.
    std::signal(SIGINT, SIG_IGN);
    return roundTripAgent.parsed() ? runRoundTripAgent(agent) : runPauseAgent(agent);
  }

  if (config.quick) {
    if (roundTrips->count() == 0) config.roundTrips = kQuickRoundTrips;
    if (iterations->count() == 0) config.pauseRounds = kQuickPauseRounds;
    if (versionReads->count() == 0) config.versionReads = kQuickVersionReads;
    config.versionRepetitions = kQuickVersionRepetitions;
  }
  try {
    return runBusMode(config);
  } catch (const std::exception& error) {
    if (interrupted()) {
      std::cerr << "wsync-bench bus: interrupted; agents stopped, nothing written\n";
      return 130;  // the shell's convention for a run ended by Ctrl-C
    }
    std::cerr << "wsync-bench bus: " << error.what() << '\n';
    return 1;
  }
}
