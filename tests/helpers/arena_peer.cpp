// arena_peer: one side of a shm arena in a process of its own, for tests/integration/shm_arena_processes_test.cpp.
// The test process owns the arena (it creates it and may abort a transfer); this program sends or receives.
//
// Usage:
//   arena_peer send         ARENA FIRST COUNT RECEIVERS MODEL SEED DEADLINE_MS
//   arena_peer send-nowait  ARENA FIRST COUNT RECEIVERS MODEL SEED DEADLINE_MS
//   arena_peer receive      ARENA FIRST COUNT RECEIVER  MODEL SEED DEADLINE_MS
//
// Moves transfers FIRST .. FIRST + COUNT - 1 of MODEL (a name modelTensors knows, e.g. "tiny" or
// "synthetic:40:2"), bucketed as the arena's geometry says with kPlanAlignment. Transfer T carries version T of
// the content under SEED (fillTensor, then perturbTensor to T), so consecutive transfers differ in every bucket and
// a receiver that kept an earlier transfer's bytes is caught. The sender waits for the receivers listed in
// RECEIVERS (comma-separated indices); a receiver checks every byte it got against the content it expects.
// `send` starts a transfer only once every receiver has copied out the last bucket of the one before (read from the
// arena's drain tickets), as the update round does by waiting for every worker's UpdateDone; `send-nowait` starts
// the next transfer as soon as send() has returned. DEADLINE_MS bounds each transfer, counted from its start.
//
// After each transfer one line goes to stdout (flushed at once, so a test can read it while the peer still runs):
//   transfer T bytes B digest HHHHHHHHHHHHHHHHLLLLLLLLLLLLLLLL
// the digest being the XXH3-128 the arena computed, high then low 64 bits in hex.
//
// Exit codes:
//   0  every transfer done
//   1  usage: wrong arguments
//   2  setup failed: no arena, unknown model, a plan that cannot be built
//   3  Timeout        (the ChannelError of the failed send or receive)
//   4  Aborted
//   5  Overwritten
//   6  any other ChannelError
//   7  a receiver got bytes other than the content of its transfer
// On failure one line giving the reason goes to stderr.
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>
#include <wsync/bus/channel/shm/shm_arena_data.hpp>
#include <wsync/bus/protocol/manifest.hpp>
#include <wsync/cli/model_catalog.hpp>

namespace {

namespace bip = boost::interprocess;
namespace bus = wsync::bus;
namespace cli = wsync::cli;
using Clock = std::chrono::steady_clock;

enum ExitCode : int {
  kOk = 0,
  kUsage = 1,
  kSetupFailed = 2,
  kTimedOut = 3,
  kAborted = 4,
  kOverwritten = 5,
  kChannelFailed = 6,
  kWrongBytes = 7,
};

// Tensors start at multiples of 256 bytes in a bucket, as for GPU copies; both sides must use the same value.
constexpr std::uint32_t kPlanAlignment = 256;
// How often `send` looks whether the receivers have drained the previous transfer.
constexpr std::chrono::milliseconds kDrainPollInterval{1};

int failWith(ExitCode code, const std::string& reason) {
  std::fprintf(stderr, "arena_peer: %s\n", reason.c_str());
  return code;
}

int failWith(const bus::ChannelFailure& failure, std::uint64_t transfer) {
  const std::string reason = "transfer " + std::to_string(transfer) + ": " + failure.describe();
  switch (failure.code) {
    case bus::ChannelError::Timeout:
      return failWith(kTimedOut, reason);
    case bus::ChannelError::Aborted:
      return failWith(kAborted, reason);
    case bus::ChannelError::Overwritten:
      return failWith(kOverwritten, reason);
    default:
      return failWith(kChannelFailed, reason);
  }
}

template <typename Number>
std::optional<Number> parseNumber(std::string_view text) {
  Number value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::optional<std::vector<std::uint32_t>> parseReceivers(std::string_view text) {
  std::vector<std::uint32_t> receivers;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    auto receiver = parseNumber<std::uint32_t>(text.substr(0, comma));
    if (!receiver) return std::nullopt;
    receivers.push_back(*receiver);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  if (receivers.empty()) return std::nullopt;
  return receivers;
}

struct Arguments {
  bool send = false;
  bool waitForDrain = false;  // send: start a transfer only once the previous one is drained
  std::string arena;
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  std::vector<std::uint32_t> receivers;  // send: those to wait for; receive: the one index this process is
  std::string model;
  std::uint64_t seed = 0;
  std::chrono::milliseconds deadline{0};
};

std::optional<Arguments> parseArguments(int argc, char** argv) {
  if (argc != 9) return std::nullopt;
  const std::string_view role = argv[1];
  if (role != "send" && role != "send-nowait" && role != "receive") return std::nullopt;
  Arguments arguments;
  arguments.send = role != "receive";
  arguments.waitForDrain = role == "send";
  arguments.arena = argv[2];
  auto first = parseNumber<std::uint64_t>(argv[3]);
  auto count = parseNumber<std::uint64_t>(argv[4]);
  auto receivers = parseReceivers(argv[5]);
  auto seed = parseNumber<std::uint64_t>(argv[7]);
  auto deadlineMs = parseNumber<std::int64_t>(argv[8]);
  if (!first || !count || !receivers || !seed || !deadlineMs || *first == 0 || *count == 0) return std::nullopt;
  if (!arguments.send && receivers->size() != 1) return std::nullopt;
  arguments.first = *first;
  arguments.count = *count;
  arguments.receivers = std::move(*receivers);
  arguments.model = argv[6];
  arguments.seed = *seed;
  arguments.deadline = std::chrono::milliseconds{*deadlineMs};
  return arguments;
}

// One buffer per tensor, sized as the manifest says.
std::vector<std::vector<std::byte>> allocateTensors(const bus::Manifest& manifest) {
  std::vector<std::vector<std::byte>> tensors;
  tensors.reserve(manifest.size());
  for (std::size_t i = 0; i < manifest.size(); ++i) tensors.emplace_back(manifest.tensorBytes(i));
  return tensors;
}

// The content of `version`: what the sender packs and what every receiver must end up with.
void writeVersion(std::vector<std::vector<std::byte>>& tensors, std::uint64_t seed, std::uint64_t version) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    cli::fillTensor(tensors[i], seed, static_cast<std::uint32_t>(i));
    cli::perturbTensor(tensors[i], seed, static_cast<std::uint32_t>(i), version);
  }
}

// The receivers' drain tickets, through a read-only mapping of the arena's control area (shm_arena_data.hpp).
class DrainView {
 public:
  explicit DrainView(const std::string& arena)
      : region_(bip::shared_memory_object(bip::open_only, arena.c_str(), bip::read_only), bip::read_only, 0,
                sizeof(bus::ArenaControlData)) {}

  // Whether every receiver in `receivers` has copied out `bucket` of `transfer` (its ticket as docs/shm-channel.md
  // defines it); receivers copy buckets in order, so the last bucket stands for all of them.
  bool drained(std::uint64_t transfer, std::uint32_t bucket, std::uint32_t bufferCount,
               const std::vector<std::uint32_t>& receivers) const {
    const auto& control = *static_cast<const bus::ArenaControlData*>(region_.get_address());
    const std::uint64_t ticket = (transfer << 32) | (std::uint64_t{bucket} + 1);
    for (std::uint32_t receiver : receivers) {
      if (control.drains[bucket % bufferCount][receiver].ticket.load(std::memory_order_acquire) < ticket) return false;
    }
    return true;
  }

 private:
  bip::mapped_region region_;
};

void printResult(std::uint64_t transfer, const bus::TransferResult& result) {
  std::printf("transfer %" PRIu64 " bytes %" PRIu64 " digest %016" PRIx64 "%016" PRIx64 "\n", transfer, result.bytes,
              result.digest.hi, result.digest.lo);
  std::fflush(stdout);
}

int run(const Arguments& arguments) {
  auto arena = bus::ShmArena::open(arguments.arena);
  if (!arena) return failWith(kSetupFailed, arena.error().describe());
  auto specs = cli::modelTensors(arguments.model);
  if (!specs) return failWith(kSetupFailed, specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) return failWith(kSetupFailed, manifest.error().describe());
  auto plan = bus::BucketPlan::build(*manifest, arena->geometry().bucketBytes, kPlanAlignment);
  if (!plan) return failWith(kSetupFailed, plan.error().describe());

  // The sender's tensors, or the content a receiver expects.
  std::vector<std::vector<std::byte>> content = allocateTensors(*manifest);
  std::vector<std::vector<std::byte>> staging =
      arguments.send ? std::vector<std::vector<std::byte>>{} : allocateTensors(*manifest);
  for (std::uint64_t transfer = arguments.first; transfer < arguments.first + arguments.count; ++transfer) {
    writeVersion(content, arguments.seed, transfer);
    const auto deadline = Clock::now() + arguments.deadline;
    if (arguments.send) {
      const std::vector<std::span<const std::byte>> tensors(content.begin(), content.end());
      auto sent = arena->send(transfer, *plan, tensors, arguments.receivers, deadline);
      if (!sent) return failWith(sent.error(), transfer);
      printResult(transfer, *sent);
      if (arguments.waitForDrain && plan->bucketCount() > 0) {
        const DrainView drains(arguments.arena);
        while (!drains.drained(transfer, plan->bucketCount() - 1, arena->geometry().bufferCount, arguments.receivers)) {
          if (Clock::now() >= deadline) {
            return failWith(kTimedOut, "transfer " + std::to_string(transfer) + ": receivers never drained it");
          }
          std::this_thread::sleep_for(kDrainPollInterval);
        }
      }
      continue;
    }
    // Bytes no transfer writes, so that a piece the arena skipped cannot pass for one it copied.
    for (std::vector<std::byte>& tensor : staging) std::memset(tensor.data(), 0xA5, tensor.size());
    const std::vector<std::span<std::byte>> tensors(staging.begin(), staging.end());
    auto received = arena->receive(transfer, *plan, tensors, arguments.receivers.front(), deadline);
    if (!received) return failWith(received.error(), transfer);
    for (std::size_t i = 0; i < staging.size(); ++i) {
      if (staging[i] != content[i]) {
        return failWith(kWrongBytes, "transfer " + std::to_string(transfer) + ": tensor " + std::to_string(i) + " (" +
                                         manifest->tensors()[i].name + ") differs from what was sent");
      }
    }
    printResult(transfer, *received);
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  const auto arguments = parseArguments(argc, argv);
  if (!arguments) {
    std::fprintf(stderr,
                 "usage: %s send|send-nowait ARENA FIRST COUNT RECEIVERS MODEL SEED DEADLINE_MS\n"
                 "       %s receive ARENA FIRST COUNT RECEIVER MODEL SEED DEADLINE_MS\n",
                 argv[0], argv[0]);
    return kUsage;
  }
  return run(*arguments);
}
