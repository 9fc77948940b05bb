#pragma once
// What tests/helpers/gpu_peer.cpp and the GPU tests agree on: the peer's exit codes, the models it knows (the
// catalog's and a mixed-dtype one of its own), the content of each version, and the lines it prints.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/model_catalog.hpp"

namespace wsync::test::gpu_peer {

// gpu_peer's exit codes. A failed transfer is named by its ChannelError; the last two are the peer's own checks.
enum ExitCode : int {
  kOk = 0,
  kUsage = 1,               // wrong arguments
  kSetupFailed = 2,         // a CUDA call, the model, the plan or opening the channel failed
  kTimedOut = 3,            // ChannelError::Timeout (the transfer's deadline, or the nccl stall watchdog)
  kAborted = 4,             // ChannelError::Aborted (the cancel probe saw a dead peer, or the owner aborted)
  kCommunicatorFailed = 5,  // ChannelError::CommunicatorError
  kDigestMismatch = 6,      // ChannelError::DigestMismatch (cuda_ipc receivers disagreed)
  kChannelFailed = 7,       // any other ChannelError (DeviceError, PlanMismatch, ...)
  kWrongBytes = 8,          // a receiver's tensors differ from the content of the version
  kWrongDigest = 9,         // bytes or digest returned differ from the host reference (deviceChecksumOfHost)
};

// A cuda_ipc receiver's agent id is this and its index ("gpu-peer-1"), as an agent's would be its own: the sender's
// faults name receivers by it.
inline constexpr std::string_view kAgentIdPrefix = "gpu-peer-";

// The plan's alignment unless --alignment says otherwise: tensors start at multiples of 256 bytes in a bucket.
inline constexpr std::uint32_t kPlanAlignment = 256;

// The peer's own model: every dtype the GPU channels move, sizes of 1, 3, 7, 13 and about a million bytes (odd
// tails for the digest's zero padding, pieces that are not multiples of 16 bytes), a scalar, an empty tensor, and
// tensors larger than a 64 KiB bucket (they span buckets, and their middle buckets hold a single piece: the direct
// path of the nccl channel).
inline constexpr std::string_view kMixedModel = "mixed";

inline std::vector<bus::TensorSpec> mixedDtypeTensors() {
  using wsync::msg::DType;
  return {
      {"embed.bf16", DType::BF16, {500'001}},         // 1,000,002 bytes
      {"scalar.bf16", DType::BF16, {}},               // 2
      {"norm.f16", DType::F16, {3}},                  // 6
      {"proj.f32", DType::F32, {7, 13}},              // 364
      {"one.f8", DType::F8E4M3, {1}},                 // 1
      {"three.f8", DType::F8E4M3, {3}},               // 3
      {"seven.i8", DType::I8, {7}},                   // 7
      {"thirteen.i8", DType::I8, {13}},               // 13
      {"big.i8", DType::I8, {1'000'003}},             // 1,000,003
      {"odd.i32", DType::I32, {13}},                  // 52
      {"one.i64", DType::I64, {1}},                   // 8
      {"empty.f32", DType::F32, {0}},                 // 0
      {"wide.f32", DType::F32, {3, 100'003}},         // 1,200,036
      {"spans.f8", DType::F8E4M3, {3 * 65'536 + 5}},  // 196,613
      {"many.i64", DType::I64, {4'099}},              // 32,792
      {"block.f16", DType::F16, {32'768}},            // 65,536: one small bucket's worth
      {"last.bf16", DType::BF16, {1}},                // 2
  };
}

// The tensors of `model`: kMixedModel, or a name cli::modelTensors knows ("tiny", "synthetic:COUNT:MIB", ...).
inline tl::expected<std::vector<bus::TensorSpec>, cli::ModelCatalogFailure> peerModelTensors(std::string_view model) {
  if (model == kMixedModel) return mixedDtypeTensors();
  return cli::modelTensors(model);
}

// Version `version` of the content under `seed`, from tensors that hold any earlier version of it (or were just
// filled: fillTensor once, then this for every version). What the sender sends and every receiver must get.
inline void fillContent(std::vector<std::vector<std::byte>>& tensors, std::uint64_t seed) {
  for (std::size_t i = 0; i < tensors.size(); ++i) cli::fillTensor(tensors[i], seed, static_cast<std::uint32_t>(i));
}
inline void moveContentToVersion(std::vector<std::vector<std::byte>>& tensors, std::uint64_t seed,
                                 std::uint64_t version) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    cli::perturbTensor(tensors[i], seed, static_cast<std::uint32_t>(i), version);
  }
}

// Output lines (stdout, one per line, flushed at once):
//   open ok rank=R device=D pid=P
//   round R ok bytes=B digest=HHHHHHHHHHHHHHHHLLLLLLLLLLLLLLLL ms=T gpu_free_before=F gpu_free_after=F
//         gpu_used_peak=U rss_kib=K channel_buffer_bytes=X channel_table_bytes=Y [generation=G handles=H] moved=0|1
//   round R FAIL code=<ChannelError or check> ms=T <what failed>
// Round R carries version R and transfer id R. The digest is the Digest's hi then lo, in hex.
inline constexpr std::string_view kRoundWord = "round";
inline constexpr std::string_view kOkWord = "ok";
inline constexpr std::string_view kFailWord = "FAIL";

inline std::string digestHex(const bus::Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (const std::uint64_t half : {digest.hi, digest.lo}) {
    for (int shift = 60; shift >= 0; shift -= 4) text += kHex[(half >> shift) & 0xFU];
  }
  return text;
}

}  // namespace wsync::test::gpu_peer
