#pragma once
// Models by name, for tests, benchmarks and demos that need a realistic manifest without a real checkpoint: the
// tensors of a known model, and deterministic content for them that changes cheaply from one version to the next.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"
#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::cli {

using bus::Failure;
using bus::TensorSpec;

enum class ModelCatalogError : std::uint8_t {
  UnknownModel,          // a name the catalog does not know; the detail lists the ones it does
  InvalidSyntheticSpec,  // "synthetic:COUNT:MIB" that does not parse, or a count or size out of range
  InvalidLayerCount,     // "deepseek-v3:LAYERS" that does not parse, or more layers than the model has
};

std::string_view toString(ModelCatalogError error);

using ModelCatalogFailure = Failure<ModelCatalogError>;

// A synthetic model's tensors average at least this many bytes: below it the smallest tensors round to a single
// element, and the total can no longer be held within 1% of what was asked.
inline constexpr std::uint64_t kMinSyntheticBytesPerTensor = 256;

// "opt-125m", "qwen2.5-7b", "qwen3-30b-a3b", the pattern "deepseek-v3:LAYERS", "tiny" and the pattern
// "synthetic:COUNT:MIB", for help texts and error messages.
std::span<const std::string_view> knownModels();

// The ordered tensors of a model; every list passes Manifest::create.
//  - "opt-125m": facebook/opt-125m as transformers' OPTForCausalLM.state_dict() lists it in float16, in its order
//    (embed_tokens, embed_positions, final_layer_norm, then layers 0..11), without lm_head.weight, which is tied
//    to embed_tokens and saved once. 196 tensors, 125,239,296 parameters, 250,478,592 bytes.
//  - "qwen2.5-7b": Qwen/Qwen2.5-7B as transformers' Qwen2ForCausalLM.state_dict() lists it in bfloat16:
//    embed_tokens, then layers 0..27 (self_attn.{q,k,v}_proj.{weight,bias}, self_attn.o_proj.weight,
//    mlp.{gate,up,down}_proj.weight, input_layernorm.weight, post_attention_layernorm.weight), model.norm.weight and
//    an untied lm_head.weight. Hidden 3584, intermediate 18944, 4 KV heads of 128 (k/v_proj 512 rows), vocabulary
//    152064. 339 tensors, 7,615,616,512 parameters, 15,231,233,024 bytes.
//  - "qwen3-30b-a3b": Qwen/Qwen3-30B-A3B as transformers' Qwen3MoeForCausalLM.state_dict() lists it in bfloat16, with
//    one tensor per expert projection (the checkpoint's names): embed_tokens, then layers 0..47
//    (self_attn.{q,k,v,o}_proj.weight, self_attn.{q,k}_norm.weight, mlp.gate.weight (the router, 128 x 2048),
//    mlp.experts.{0..127}.{gate,up,down}_proj.weight, input_layernorm.weight, post_attention_layernorm.weight),
//    model.norm.weight and an untied lm_head.weight. 18,867 tensors, 30,532,122,624 parameters,
//    61,064,245,248 bytes: shape only, for GPU benchmarks that fill tensors on the device.
//  - "deepseek-v3:LAYERS": deepseek-ai/DeepSeek-V3 as its FP8 checkpoint stores it, cut to its first LAYERS
//    (1..61) decoder layers: embed_tokens, then per layer the MLA attention (q_a_proj, q_a_layernorm, q_b_proj,
//    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), the MLP (layers 0..2 dense; later ones 256 experts,
//    the router mlp.gate.{weight,e_score_correction_bias} and one shared expert), the two layer norms; then
//    model.norm and an untied lm_head. Every projection is F8_E4M3 followed by its F32 "weight_scale_inv" (one
//    per 128 x 128 block); the rest BF16. Layer 0..2: 20 tensors each, a MoE layer 1,558. "deepseek-v3:61" is the
//    whole model without its MTP layer: 90,427 tensors, 673,150,611,808 bytes; "deepseek-v3:8" (3 dense and 5 MoE
//    layers, 7,853 tensors, 63,017,394,944 bytes) fits one GPU of 141 GB per side with buckets to spare. Shape only.
//  - "tiny": 8 tensors of F32, BF16, F16 and I64, a scalar and a zero-byte one among them, 4,322 bytes.
//  - "synthetic:COUNT:MIB": COUNT (1..kMaxTensors) BF16 tensors "layers.L.{attn_norm,wq,wk,wv,wo,ffn_norm,w1,w2,w3}"
//    of 1-D and 2-D shapes whose sizes spread over two orders of magnitude, MIB mebibytes in all (within 1%), and
//    at least kMinSyntheticBytesPerTensor per tensor on average. Same arguments, same list.
tl::expected<std::vector<TensorSpec>, ModelCatalogFailure> modelTensors(std::string_view name);

// Deterministic tensor content: bit patterns, not meaningful numbers (a float may be NaN), the same on every
// little-endian host.
//
// fillTensor writes the content of version 0 of tensor `tensorIndex` under `seed`: a splitmix64 stream, 8 bytes
// per step, several GB/s on one core. perturbTensor turns the content of any version of that tensor (same seed,
// index and size) into the content of `version`: it overwrites the 8 bytes at every multiple of kPerturbStride and
// the last 8 bytes (fewer where the tensor ends sooner) with a hash of (seed, tensorIndex, version, offset) whose
// first and last bytes step by one with the version: 1/32 of the words a fill computes (though, out of cache, one
// cache line in four). So:
//  - after fillTensor and any sequence of perturbTensor calls ending with `version`, the bytes depend only on
//    (seed, tensorIndex, size, version), never on the versions in between;
//  - versions v and v - 1 differ in the tensor's first byte, in its last byte, and somewhere in every run of
//    kPerturbStride bytes. Any piece of a tensor that starts at its beginning, ends at its end or holds
//    kPerturbStride bytes therefore changes, and with it every bucket of a BucketPlan whose buckets hold at least
//    kPerturbStride bytes.
inline constexpr std::size_t kPerturbStride = 256;
void fillTensor(std::span<std::byte> out, std::uint64_t seed, std::uint32_t tensorIndex);
void perturbTensor(std::span<std::byte> out, std::uint64_t seed, std::uint32_t tensorIndex, std::uint64_t version);

}  // namespace wsync::cli
