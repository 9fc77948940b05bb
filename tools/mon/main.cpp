// wsync-mon: watches a running bus without touching its data path. It subscribes to the coordinator's events,
// asks for a snapshot (so it is right even when it joins late, and again whenever it sees that events were lost),
// and shows the agents and the rounds live; --json prints one JSON object per event instead, and
// --prometheus HOST:PORT serves the metrics on /metrics.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include <httplib.h>
#include <CLI/CLI.hpp>

#include "bus_state.hpp"
#include "live_view.hpp"
#include "prometheus_text.hpp"
#include "wsync/bus/protocol/bus_json.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"
#include "wsync/bus/transport/event_subscriber.hpp"
#include "wsync/cli/curve_flags.hpp"

namespace {

using namespace wsync;
using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoCoordinator = 3;

// The coordinator beats every heartbeat interval (200 ms by default): a bus silent for this long has none
// (--wait-ms).
constexpr std::chrono::seconds kCoordinatorWait{10};
// How often the agent table (applied versions, heartbeat ages) is refreshed from a snapshot: events say who came
// and went, only snapshots say how each agent is doing. One small request a second per monitor.
constexpr std::chrono::milliseconds kSnapshotInterval{1000};
// A snapshot request that gets no answer in this long is sent again.
constexpr std::chrono::milliseconds kSnapshotRetry{2000};
// Events are drained in batches this often instead of waking the monitor for each one: many monitors on a busy
// host then cost its CPUs little (bench/results/monitors-*), and the socket's queue (bus::kHighWaterMark) holds far
// more than arrives meanwhile.
constexpr std::chrono::milliseconds kDrainInterval{100};
// After a round ends, the workers' new applied versions reach the coordinator with their next heartbeat (200 ms
// by default): the agent table is refreshed this long after, rather than up to a second later.
constexpr std::chrono::milliseconds kSnapshotAfterRound{300};
// While a payload moves, the bytes done come from snapshots this often: a live rate without a request per frame.
constexpr std::chrono::milliseconds kSnapshotDuringTransfer{250};

std::atomic<bool> stopRequested{false};
void requestStop(int) { stopRequested.store(true, std::memory_order_release); }

std::optional<std::pair<std::string, int>> parseHostPort(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  try {
    const int port = std::stoi(text.substr(colon + 1));
    if (port < 0 || port > 65535) return std::nullopt;
    return std::make_pair(text.substr(0, colon), port);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string busName;
  std::string transport = "ipc";
  bool json = false;
  bool once = false;
  std::string prometheus;
  std::int64_t refreshMs = 250;
  std::int64_t waitMs = std::chrono::milliseconds(kCoordinatorWait).count();
  CLI::App app{"wsync-mon: watches a wsync bus (agents, rounds, metrics) without touching its data path"};
  app.add_option("--bus", busName, "bus name")->required();
  app.add_option("--transport", transport, "ipc or tcp://HOST:PORT (the coordinator's)")->capture_default_str();
  cli::CurveClientFlags curveFlags;
  curveFlags.addTo(app);
  app.add_flag("--json", json, "print one JSON object per event, one per line, instead of the live view");
  app.add_option("--prometheus", prometheus, "serve the metrics on http://HOST:PORT/metrics (port 0: any free one)");
  app.add_option("--wait-ms", waitMs, "give up (exit 3) when no event arrives from the coordinator in this long")
      ->capture_default_str()
      ->check(CLI::Range(1, 3'600'000));
  app.add_flag("--once", once, "print the view once, as soon as the bus's state is known, and exit");
  app.add_option("--refresh-ms", refreshMs, "how often the live view is redrawn")
      ->capture_default_str()
      ->check(CLI::Range(20, 60'000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? kExitOk : kExitUsage;
  }
  std::optional<std::pair<std::string, int>> listenAt;
  if (!prometheus.empty()) {
    listenAt = parseHostPort(prometheus);
    if (!listenAt) {
      std::fprintf(stderr, "wsync-mon: --prometheus '%s': expected HOST:PORT\n", prometheus.c_str());
      return kExitUsage;
    }
  }
  auto endpoints = bus::resolveEndpoints(busName, transport);
  if (!endpoints) {
    std::fprintf(stderr, "wsync-mon: bus '%s': %s\n", busName.c_str(), endpoints.error().describe().c_str());
    return kExitUsage;
  }
  const auto curve = curveFlags.client();
  if (!curve) {
    std::fprintf(stderr, "wsync-mon: %s\n", curve.error().c_str());
    return kExitUsage;
  }
  struct sigaction action {};
  action.sa_handler = requestStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  zmq::context_t context(1);
  auto events = bus::EventSubscriber::connect(context, endpoints->events, {""}, *curve);
  auto requests = bus::DealerEndpoint::connect(context, endpoints->requests, "wsync-mon", *curve);
  if (!events || !requests) {
    std::fprintf(stderr, "wsync-mon: %s\n", (!events ? events.error() : requests.error()).describe().c_str());
    return kExitError;
  }

  mon::BusState state;
  std::mutex stateMutex;  // the HTTP thread renders the metrics from it
  std::optional<httplib::Server> server;
  std::thread serverThread;
  if (listenAt) {
    server.emplace();
    server->Get("/metrics", [&](const httplib::Request&, httplib::Response& response) {
      std::lock_guard lock(stateMutex);
      response.set_content(mon::prometheusText(state, busName, Clock::now()), "text/plain; version=0.0.4");
    });
    const int port = listenAt->second == 0
                         ? server->bind_to_any_port(listenAt->first)
                         : (server->bind_to_port(listenAt->first, listenAt->second) ? listenAt->second : -1);
    if (port < 0) {
      std::fprintf(stderr, "wsync-mon: --prometheus %s: cannot listen there\n", prometheus.c_str());
      return kExitError;
    }
    // Scripts and tests learn the port from this line (on stderr, so that --json's stdout stays pure JSON).
    std::fprintf(stderr, "wsync-mon: metrics on http://%s:%d/metrics\n", listenAt->first.c_str(), port);
    serverThread = std::thread([&] { server->listen_after_bind(); });
  }

  // Subscribed first; the snapshot is asked for only once an event proved the subscription live, so that every
  // event after the snapshot arrives.
  bool live = false;
  std::optional<Clock::time_point> snapshotAsked;
  Clock::time_point nextSnapshot = Clock::now();
  Clock::time_point nextFrame = Clock::now();
  const auto startedAt = Clock::now();
  const bool tty = isatty(STDOUT_FILENO) == 1;
  bus::MessageBuilder builder;
  std::uint64_t requestSeq = 0;
  int status = kExitOk;

  auto askSnapshot = [&] {
    builder.reset();
    const auto bytes = builder.finish(msg::CreateSnapshotRequest(builder.fbb()), bus::EnvelopeStamp{0, ++requestSeq});
    (void)requests->send(bytes);
    snapshotAsked = Clock::now();
  };

  while (!stopRequested.load(std::memory_order_acquire)) {
    const auto now = Clock::now();
    if (!live) {
      // A refused key would otherwise look like a bus without a coordinator.
      if (auto refused = requests->handshakeRefusal()) {
        std::fprintf(stderr, "wsync-mon: %s\n", refused->c_str());
        status = kExitError;
        break;
      }
    }
    if (!live && now - startedAt > std::chrono::milliseconds(waitMs)) {
      std::fprintf(stderr, "wsync-mon: no coordinator on bus '%s' (no event within %lld ms)\n", busName.c_str(),
                   static_cast<long long>(waitMs));
      status = kExitNoCoordinator;
      break;
    }
    if (live && (snapshotAsked ? now - *snapshotAsked > kSnapshotRetry : now >= nextSnapshot)) askSnapshot();

    // Until the first snapshot the monitor answers as soon as it can; from then on it drains in batches.
    if (state.hasSnapshot()) {
      std::this_thread::sleep_for(kDrainInterval);
    } else {
      zmq::pollitem_t items[] = {{events->handle().handle(), 0, ZMQ_POLLIN, 0},
                                 {requests->handle().handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(50));
      } catch (const zmq::error_t& error) {
        if (error.num() != EINTR) throw;  // a signal: the loop looks at stopRequested
      }
    }

    while (true) {
      auto received = events->receive(std::chrono::milliseconds(0));
      if (!received || !*received) break;
      if (!(*received)->message) continue;  // counted by the subscriber; a monitor does not die of one bad event
      const bus::Message& event = *(*received)->message;
      if (json) {
        std::printf("%s\n", bus::jsonText(bus::eventJson((*received)->source, event)).c_str());
        std::fflush(stdout);
      }
      if (!live) {
        live = true;
        askSnapshot();
      }
      if ((*received)->source == "round/idle")
        nextSnapshot = std::min(nextSnapshot, Clock::now() + kSnapshotAfterRound);
      if ((*received)->source == "round/transfer") {
        nextSnapshot = std::min(nextSnapshot, Clock::now() + kSnapshotDuringTransfer);
      }
      std::lock_guard lock(stateMutex);
      if (state.apply((*received)->source, event, Clock::now()) == mon::BusState::Applied::Gap && !snapshotAsked) {
        askSnapshot();
      }
    }
    while (true) {
      auto received = requests->receive(std::chrono::milliseconds(0));
      if (!received || !*received) break;
      if (!(*received)->message || (*received)->message->as<msg::SnapshotReply>() == nullptr) continue;
      std::lock_guard lock(stateMutex);
      state.applySnapshot(*(*received)->message, Clock::now());
      snapshotAsked.reset();
      const bool transferring = state.current() && state.current()->phase == msg::RoundPhase::Transfer;
      nextSnapshot = Clock::now() + (transferring ? kSnapshotDuringTransfer : kSnapshotInterval);
    }

    if (!json && state.hasSnapshot() && (once || Clock::now() >= nextFrame)) {
      std::string frame;
      {
        std::lock_guard lock(stateMutex);
        frame = mon::renderView(state, busName, Clock::now());
      }
      // In place on a terminal (home, clear); elsewhere frames follow each other, separated by a blank line.
      std::printf("%s%s%s", tty && !once ? "\x1b[H\x1b[2J" : "", frame.c_str(), tty || once ? "" : "\n");
      std::fflush(stdout);
      nextFrame = Clock::now() + std::chrono::milliseconds(refreshMs);
      if (once) break;
    }
  }
  if (server) {
    server->stop();
    serverThread.join();
  }
  return status;
}
