#include "wsync/cli/corrupting_channel.hpp"

#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::cli {

namespace {

// XXH3-128 over the tensors' bytes in order: what the host channel (shm) reports for the same bytes.
bus::TransferResult digestTensors(std::span<const std::span<std::byte>> tensors) {
  bus::StreamDigest stream;
  for (const auto& tensor : tensors) stream.add(tensor.data(), tensor.size());
  return bus::TransferResult{stream.bytes(), stream.digest()};
}

// Progress is set on the decorator (Channel::setProgress is not virtual): the inner channel reports through it for
// the length of one transfer, and holds nothing of it after.
class ProgressThrough {
 public:
  ProgressThrough(bus::Channel& inner, const bus::TransferProgress& progress) : inner_(inner) {
    inner_.setProgress(progress);
  }
  ~ProgressThrough() { inner_.setProgress({}); }
  ProgressThrough(const ProgressThrough&) = delete;
  ProgressThrough& operator=(const ProgressThrough&) = delete;

 private:
  bus::Channel& inner_;
};

}  // namespace

CorruptingChannel::CorruptingChannel(std::unique_ptr<bus::Channel> inner, std::function<bool()> corruptNow)
    : inner_(std::move(inner)), corruptNow_(std::move(corruptNow)) {}

tl::expected<bus::TransferResult, bus::ChannelFailure> CorruptingChannel::send(
    std::uint64_t transfer, const bus::BucketPlan& plan, std::span<const std::span<const std::byte>> tensors,
    std::uint32_t receiverCount, std::chrono::steady_clock::time_point deadline) {
  const ProgressThrough through(*inner_, progress());
  return inner_->send(transfer, plan, tensors, receiverCount, deadline);
}

tl::expected<bus::TransferResult, bus::ChannelFailure> CorruptingChannel::receive(
    std::uint64_t transfer, const bus::BucketPlan& plan, std::span<const std::span<std::byte>> tensors,
    std::uint32_t receiver, std::chrono::steady_clock::time_point deadline) {
  auto received = [&] {
    const ProgressThrough through(*inner_, progress());
    return inner_->receive(transfer, plan, tensors, receiver, deadline);
  }();
  if (!received || !corruptNow_()) return received;
  return corrupt(*received, tensors);
}

tl::expected<bus::RegionTransferResult, bus::ChannelFailure> CorruptingChannel::receiveRegions(
    std::uint64_t transfer, const bus::RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) {
  auto received = inner_->receiveRegions(transfer, plan, receiver, locals, deadline);
  if (!received || !corruptNow_()) return received;
  if (inner_->tensorMemory() == bus::TensorMemory::Host) {
    for (const auto& local : locals) {
      if (local.empty()) continue;
      local[0] ^= std::byte{0x01};
      break;
    }
  }
  for (bus::PairResult& pair : *received) {
    if (pair.bytes == 0) continue;
    log::warn("test fault: spoiled a region receive (digest {} -> wrong)", bus::hex(pair.digest));
    pair.digest.lo ^= 1;
    break;
  }
  return received;
}

bus::TransferResult CorruptingChannel::corrupt(const bus::TransferResult& received,
                                               std::span<const std::span<std::byte>> tensors) {
  if (inner_->tensorMemory() == bus::TensorMemory::Device) {
    bus::TransferResult reported = received;
    reported.digest.lo ^= 1;
    log::warn("test fault: the bytes are on the device; reporting a wrong digest ({} -> {})", bus::hex(received.digest),
              bus::hex(reported.digest));
    return reported;
  }
  // The corrupted digest only means something if it is computed as the channel computes its own: check that on
  // the intact bytes first.
  if (digestTensors(tensors).digest != received.digest) {
    log::warn("test fault: the tensors' digest differs from the channel's even before corruption");
  }
  for (const auto& tensor : tensors) {
    if (tensor.empty()) continue;
    tensor[0] ^= std::byte{0x01};
    break;
  }
  const bus::TransferResult corrupted = digestTensors(tensors);
  log::warn("test fault: flipped one received byte (digest {} -> {})", bus::hex(received.digest),
            bus::hex(corrupted.digest));
  return corrupted;
}

}  // namespace wsync::cli
