#include "tcp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/tcp/tcp_channel.hpp>
#include <wsync/bus/channel/tcp/tcp_listener.hpp>

#include "bench_failure.hpp"
#include "machine_load.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

// Rotated every round, so that neither always runs first.
enum class TcpPath : std::uint8_t { Channel, Raw };
constexpr std::array kPaths{TcpPath::Channel, TcpPath::Raw};

double gigabytesPerSecond(std::uint64_t bytes, Clock::duration elapsed) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  return ns > 0 ? static_cast<double>(bytes) / static_cast<double>(ns) : 0;
}

// A loopback connection of the raw baseline, made once per measurement (the channel connects every round).
struct RawLink {
  int sender = -1;
  int receiver = -1;
  RawLink() = default;
  RawLink(RawLink&& other) noexcept
      : sender(std::exchange(other.sender, -1)), receiver(std::exchange(other.receiver, -1)) {}
  ~RawLink() {
    if (sender >= 0) ::close(sender);
    if (receiver >= 0) ::close(receiver);
  }
};

RawLink connectLoopback() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  RawLink link;
  const bool listening = ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                         ::listen(listener, 1) == 0 &&
                         ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  link.sender = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listening && ::connect(link.sender, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    link.receiver = ::accept(listener, nullptr, nullptr);
  }
  ::close(listener);
  if (link.receiver < 0) throw BenchFailure("a loopback connection for the raw baseline failed");
  return link;
}

void rawSend(int fd, const std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (sent <= 0) throw BenchFailure("raw send failed");
    data += sent;
    bytes -= static_cast<std::size_t>(sent);
  }
}

bool rawReceive(int fd, std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const ssize_t got = ::recv(fd, data, bytes, 0);
    if (got <= 0) return false;
    data += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return true;
}

struct TcpMeasurement {
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t modelBytes = 0;
  std::size_t receivers = 0;
  std::vector<double> channel{}, raw{};  // GB/s of model bytes per receiver, until the last receiver finished
  std::size_t digestsCompared = 0;
  std::size_t digestsEqual = 0;
  double othersCpuShare = 0;
};

class Measurement {
 public:
  Measurement(const std::string& model, std::size_t receivers, std::uint64_t bucketBytes, TcpMeasurement& result)
      : manifest_(catalogManifest(model)),
        plan_(orThrow(bus::BucketPlan::build(manifest_, bucketBytes, kPlanAlignment), "plan")),
        source_(manifest_),
        listener_(orThrow(bus::TcpListener::open("127.0.0.1"), "listener")),
        result_(result) {
    source_.fill(kContentSeed);
    for (std::size_t r = 0; r < receivers; ++r) {
      staging_.push_back(std::make_unique<TensorMemory>(manifest_));
      links_.push_back(connectLoopback());
    }
    result_.tensors = manifest_.size();
    result_.modelBytes = manifest_.totalBytes();
  }

  void run(TcpPath path, bool measured) {
    throwIfInterrupted();
    source_.moveToVersion(kContentSeed, ++transfer_);  // untimed, both paths alike
    const auto start = Clock::now();
    if (path == TcpPath::Channel) {
      channel();
    } else {
      raw();
    }
    if (measured)
      (path == TcpPath::Channel ? result_.channel : result_.raw)
          .push_back(gigabytesPerSecond(result_.modelBytes, Clock::now() - start));
  }

 private:
  void channel() {
    std::vector<std::uint8_t> token(bus::kTcpTokenBytes);
    for (auto& byte : token) byte = static_cast<std::uint8_t>(random_());
    const auto deadline = Clock::now() + kTcpTransferTimeout;
    std::vector<tl::expected<bus::TransferResult, bus::ChannelFailure>> received(staging_.size());
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < staging_.size(); ++r) {
      threads.emplace_back([&, r] {
        auto end = bus::TcpChannel::open({nullptr, listener_->contact(), token});
        received[r] =
            end ? (*end)->receive(transfer_, plan_, staging_[r]->tensors(), static_cast<std::uint32_t>(r), deadline)
                : tl::unexpected(end.error());
      });
    }
    auto sender = orThrow(bus::TcpChannel::open({listener_, listener_->contact(), token}), "sender");
    const auto sent = orThrow(
        sender->send(transfer_, plan_, source_.constTensors(), static_cast<std::uint32_t>(staging_.size()), deadline),
        "send");
    threads.clear();  // joined
    for (const auto& got : received) {
      ++result_.digestsCompared;
      if (got && got->digest == sent.digest && got->bytes == sent.bytes) ++result_.digestsEqual;
    }
  }

  // The same tensors, in 1 MiB writes to one connection after another, each receiver reading into its copy.
  void raw() {
    std::vector<char> ok(staging_.size(), 1);
    {
      std::vector<std::jthread> threads;
      for (std::size_t r = 0; r < staging_.size(); ++r) {
        threads.emplace_back([&, r] {
          for (const auto& tensor : staging_[r]->tensors()) {
            if (!rawReceive(links_[r].receiver, tensor.data(), tensor.size())) ok[r] = 0;
          }
        });
      }
      try {
        for (const auto& tensor : source_.constTensors()) {
          for (std::size_t offset = 0; offset < tensor.size(); offset += kRawChunkBytes) {
            const std::size_t bytes = std::min(kRawChunkBytes, tensor.size() - offset);
            for (const RawLink& link : links_) rawSend(link.sender, tensor.data() + offset, bytes);
          }
        }
      } catch (...) {
        for (const RawLink& link : links_) ::shutdown(link.sender, SHUT_RDWR);  // the receivers' reads end
        throw;
      }
    }
    if (std::find(ok.begin(), ok.end(), 0) != ok.end()) throw BenchFailure("raw receive failed");
  }

  bus::Manifest manifest_;
  bus::BucketPlan plan_;
  TensorMemory source_;
  std::shared_ptr<bus::TcpListener> listener_;
  std::vector<std::unique_ptr<TensorMemory>> staging_;
  std::vector<RawLink> links_;
  TcpMeasurement& result_;
  std::uint64_t transfer_ = 0;
  std::mt19937_64 random_{std::random_device{}()};
};

double median(const std::vector<double>& samples) { return summarize(samples).median; }

}  // namespace

void runTcpBenchmark(const TcpBenchConfig& c, Report& report) {
  std::vector<TcpMeasurement> results;
  for (const std::string& model : c.models) {
    for (const std::size_t receivers : c.receivers) {
      TcpMeasurement& result = results.emplace_back(TcpMeasurement{.model = model, .receivers = receivers});
      const MachineLoad load;
      Measurement measurement(model, receivers, c.bucketMiB * kMiB, result);
      std::cerr << "model " << model << ", " << receivers << " receivers: " << kTcpWarmupRounds << " warm-up + "
                << c.repetitions << " timed rounds per path\n";
      for (std::size_t round = 0; round < kTcpWarmupRounds + c.repetitions; ++round) {
        for (std::size_t k = 0; k < kPaths.size(); ++k) {
          measurement.run(kPaths[(round + k) % kPaths.size()], round >= kTcpWarmupRounds);
        }
      }
      result.othersCpuShare = load.othersShare();
    }
  }
  report.parameters().update(Json{{"models", c.models},
                                  {"receivers", c.receivers},
                                  {"bucket_mib", c.bucketMiB},
                                  {"repetitions", c.repetitions},
                                  {"warmup_rounds", kTcpWarmupRounds},
                                  {"chunk_bytes", bus::kTcpChunkBytes}});
  Table table({{"model", "model"},
               {"tensors", "tensors"},
               {"bytes", "MiB"},
               {"receivers", "receivers"},
               {"channel_gbps", "channel"},
               {"raw_gbps", "raw TCP"},
               {"ratio", "channel/raw"},
               {"digests_equal", "digests equal"},
               {"others_cpu_share", "others' CPU"}});
  for (const TcpMeasurement& m : results) {
    table.row({m.model, m.tensors, number(mib(m.modelBytes), 0), m.receivers, spread(summarize(m.channel), "gbps", 2),
               spread(summarize(m.raw), "gbps", 2), ratio(median(m.raw) > 0 ? median(m.channel) / median(m.raw) : 0),
               digests(m.digestsEqual, m.digestsCompared), percent(m.othersCpuShare)});
  }
  report.section("transfers", "The tcp channel vs raw TCP over loopback (GB/s per receiver)",
                 "Channel: from the start of the round (receivers connect, present the token, are admitted) until the "
                 "last receiver's `receive` returned, both sides digesting (XXH3-128). Raw TCP: the same tensors "
                 "written in 1 MiB `send`s to one connection after another (connected once, before the rounds), each "
                 "receiver `recv`ing into its copy; no digest. One process: the sender on the main thread, each "
                 "receiver on a thread. Median (min-max) of the timed rounds; the paths alternate.",
                 table);
}

}  // namespace wsync::bench
