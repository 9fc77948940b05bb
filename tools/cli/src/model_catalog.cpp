#include "wsync/cli/model_catalog.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

namespace wsync::cli {

using bus::fail;
using bus::kMaxTensors;

namespace {

static_assert(std::endian::native == std::endian::little,
              "tensor content is defined as little-endian words: a big-endian host would write other bytes");

constexpr std::array<std::string_view, 6> kKnownModels{"opt-125m",           "qwen2.5-7b", "qwen3-30b-a3b",
                                                       "deepseek-v3:LAYERS", "tiny",       "synthetic:COUNT:MIB"};
constexpr std::string_view kSyntheticPrefix = "synthetic:";
constexpr std::string_view kDeepSeekPrefix = "deepseek-v3:";

// ---- opt-125m -------------------------------------------------------------------------------------------------

constexpr std::int64_t kOptVocab = 50272;
constexpr std::int64_t kOptPositions = 2048 + 2;  // OPTLearnedPositionalEmbedding keeps 2 extra rows (its offset)
constexpr std::int64_t kOptHidden = 768;
constexpr std::int64_t kOptFfn = 3072;
constexpr int kOptLayers = 12;

std::vector<TensorSpec> opt125m() {
  constexpr auto f16 = msg::DType::F16;
  std::vector<TensorSpec> tensors;
  tensors.reserve(196);
  tensors.push_back({"model.decoder.embed_tokens.weight", f16, {kOptVocab, kOptHidden}});
  tensors.push_back({"model.decoder.embed_positions.weight", f16, {kOptPositions, kOptHidden}});
  // OPTDecoder registers final_layer_norm before its layers, so state_dict() lists it here, not at the end.
  tensors.push_back({"model.decoder.final_layer_norm.weight", f16, {kOptHidden}});
  tensors.push_back({"model.decoder.final_layer_norm.bias", f16, {kOptHidden}});
  for (int layer = 0; layer < kOptLayers; ++layer) {
    const std::string prefix = "model.decoder.layers." + std::to_string(layer) + ".";
    for (const char* projection : {"k_proj", "v_proj", "q_proj", "out_proj"}) {  // OPTAttention's order
      tensors.push_back({prefix + "self_attn." + projection + ".weight", f16, {kOptHidden, kOptHidden}});
      tensors.push_back({prefix + "self_attn." + projection + ".bias", f16, {kOptHidden}});
    }
    tensors.push_back({prefix + "self_attn_layer_norm.weight", f16, {kOptHidden}});
    tensors.push_back({prefix + "self_attn_layer_norm.bias", f16, {kOptHidden}});
    tensors.push_back({prefix + "fc1.weight", f16, {kOptFfn, kOptHidden}});
    tensors.push_back({prefix + "fc1.bias", f16, {kOptFfn}});
    tensors.push_back({prefix + "fc2.weight", f16, {kOptHidden, kOptFfn}});
    tensors.push_back({prefix + "fc2.bias", f16, {kOptHidden}});
    tensors.push_back({prefix + "final_layer_norm.weight", f16, {kOptHidden}});
    tensors.push_back({prefix + "final_layer_norm.bias", f16, {kOptHidden}});
  }
  return tensors;
}

// ---- qwen2.5-7b ----------------------------------------------------------------------------------------------

// Qwen/Qwen2.5-7B's config.json: grouped KV heads (28 query heads, 4 KV heads of 128), biases on q/k/v only.
constexpr std::int64_t kQwen25Vocab = 152064;
constexpr std::int64_t kQwen25Hidden = 3584;
constexpr std::int64_t kQwen25Intermediate = 18944;
constexpr std::int64_t kQwen25KeyValue = 4 * 128;
constexpr int kQwen25Layers = 28;

std::vector<TensorSpec> qwen25Dense() {
  constexpr auto bf16 = msg::DType::BF16;
  std::vector<TensorSpec> tensors;
  tensors.reserve(339);
  tensors.push_back({"model.embed_tokens.weight", bf16, {kQwen25Vocab, kQwen25Hidden}});
  for (int layer = 0; layer < kQwen25Layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    // Qwen2Attention registers q, k, v, o; each Linear lists its weight before its bias.
    tensors.push_back({prefix + "self_attn.q_proj.weight", bf16, {kQwen25Hidden, kQwen25Hidden}});
    tensors.push_back({prefix + "self_attn.q_proj.bias", bf16, {kQwen25Hidden}});
    tensors.push_back({prefix + "self_attn.k_proj.weight", bf16, {kQwen25KeyValue, kQwen25Hidden}});
    tensors.push_back({prefix + "self_attn.k_proj.bias", bf16, {kQwen25KeyValue}});
    tensors.push_back({prefix + "self_attn.v_proj.weight", bf16, {kQwen25KeyValue, kQwen25Hidden}});
    tensors.push_back({prefix + "self_attn.v_proj.bias", bf16, {kQwen25KeyValue}});
    tensors.push_back({prefix + "self_attn.o_proj.weight", bf16, {kQwen25Hidden, kQwen25Hidden}});
    tensors.push_back({prefix + "mlp.gate_proj.weight", bf16, {kQwen25Intermediate, kQwen25Hidden}});
    tensors.push_back({prefix + "mlp.up_proj.weight", bf16, {kQwen25Intermediate, kQwen25Hidden}});
    tensors.push_back({prefix + "mlp.down_proj.weight", bf16, {kQwen25Hidden, kQwen25Intermediate}});
    tensors.push_back({prefix + "input_layernorm.weight", bf16, {kQwen25Hidden}});
    tensors.push_back({prefix + "post_attention_layernorm.weight", bf16, {kQwen25Hidden}});
  }
  tensors.push_back({"model.norm.weight", bf16, {kQwen25Hidden}});
  tensors.push_back({"lm_head.weight", bf16, {kQwen25Vocab, kQwen25Hidden}});  // not tied to embed_tokens
  return tensors;
}

// ---- qwen3-30b-a3b --------------------------------------------------------------------------------------------

// Qwen/Qwen3-30B-A3B's config.json: 32 query heads and 4 KV heads of 128 (so q_proj is wider than the hidden size),
// per-head RMS norms of q and k, and in every layer a router over 128 experts of intermediate size 768.
constexpr std::int64_t kQwen3MoeVocab = 151936;
constexpr std::int64_t kQwen3MoeHidden = 2048;
constexpr std::int64_t kQwen3MoeHeadDim = 128;
constexpr std::int64_t kQwen3MoeQuery = 32 * kQwen3MoeHeadDim;
constexpr std::int64_t kQwen3MoeKeyValue = 4 * kQwen3MoeHeadDim;
constexpr std::int64_t kQwen3MoeExpertIntermediate = 768;
constexpr int kQwen3MoeExperts = 128;
constexpr int kQwen3MoeLayers = 48;

std::vector<TensorSpec> qwen3Moe() {
  constexpr auto bf16 = msg::DType::BF16;
  std::vector<TensorSpec> tensors;
  tensors.reserve(18867);
  tensors.push_back({"model.embed_tokens.weight", bf16, {kQwen3MoeVocab, kQwen3MoeHidden}});
  for (int layer = 0; layer < kQwen3MoeLayers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    // Qwen3MoeAttention registers q, k, v, o, then q_norm and k_norm; no biases.
    tensors.push_back({prefix + "self_attn.q_proj.weight", bf16, {kQwen3MoeQuery, kQwen3MoeHidden}});
    tensors.push_back({prefix + "self_attn.k_proj.weight", bf16, {kQwen3MoeKeyValue, kQwen3MoeHidden}});
    tensors.push_back({prefix + "self_attn.v_proj.weight", bf16, {kQwen3MoeKeyValue, kQwen3MoeHidden}});
    tensors.push_back({prefix + "self_attn.o_proj.weight", bf16, {kQwen3MoeHidden, kQwen3MoeQuery}});
    tensors.push_back({prefix + "self_attn.q_norm.weight", bf16, {kQwen3MoeHeadDim}});
    tensors.push_back({prefix + "self_attn.k_norm.weight", bf16, {kQwen3MoeHeadDim}});
    // Qwen3MoeSparseMoeBlock registers the router (gate) before the experts.
    tensors.push_back({prefix + "mlp.gate.weight", bf16, {kQwen3MoeExperts, kQwen3MoeHidden}});
    for (int expert = 0; expert < kQwen3MoeExperts; ++expert) {
      const std::string expertPrefix = prefix + "mlp.experts." + std::to_string(expert) + ".";
      tensors.push_back({expertPrefix + "gate_proj.weight", bf16, {kQwen3MoeExpertIntermediate, kQwen3MoeHidden}});
      tensors.push_back({expertPrefix + "up_proj.weight", bf16, {kQwen3MoeExpertIntermediate, kQwen3MoeHidden}});
      tensors.push_back({expertPrefix + "down_proj.weight", bf16, {kQwen3MoeHidden, kQwen3MoeExpertIntermediate}});
    }
    tensors.push_back({prefix + "input_layernorm.weight", bf16, {kQwen3MoeHidden}});
    tensors.push_back({prefix + "post_attention_layernorm.weight", bf16, {kQwen3MoeHidden}});
  }
  tensors.push_back({"model.norm.weight", bf16, {kQwen3MoeHidden}});
  tensors.push_back({"lm_head.weight", bf16, {kQwen3MoeVocab, kQwen3MoeHidden}});  // not tied to embed_tokens
  return tensors;
}

// ---- deepseek-v3:LAYERS ---------------------------------------------------------------------------------------

// deepseek-ai/DeepSeek-V3's config.json and checkpoint: multi-head latent attention (q through a rank-1536
// bottleneck, k/v through a rank-512 one plus 64 rope dimensions, 128 heads), the first 3 layers dense, the other
// 58 a router over 256 experts of intermediate size 2048 plus one shared expert. Every projection is FP8 (e4m3)
// with an FP32 scale per 128 x 128 block beside it ("weight_scale_inv"); norms, embeddings, the LM head and the
// router are BF16, the router's bias FP32.
constexpr std::int64_t kDeepSeekVocab = 129280;
constexpr std::int64_t kDeepSeekHidden = 7168;
constexpr std::int64_t kDeepSeekQueryRank = 1536;
constexpr std::int64_t kDeepSeekKeyValueRank = 512;
constexpr std::int64_t kDeepSeekRopeDim = 64;
constexpr std::int64_t kDeepSeekHeads = 128;
constexpr std::int64_t kDeepSeekHeadDim = 128;  // the no-rope part of q/k, and v
constexpr std::int64_t kDeepSeekDenseIntermediate = 18432;
constexpr std::int64_t kDeepSeekExpertIntermediate = 2048;
constexpr std::int64_t kDeepSeekScaleBlock = 128;
constexpr int kDeepSeekExperts = 256;
constexpr int kDeepSeekDenseLayers = 3;
constexpr int kDeepSeekLayers = 61;

// An FP8 projection as the checkpoint stores it: the weight, then its block scales.
void deepSeekLinear(std::vector<TensorSpec>& tensors, const std::string& name, std::int64_t rows,
                    std::int64_t columns) {
  const auto blocks = [](std::int64_t size) { return (size + kDeepSeekScaleBlock - 1) / kDeepSeekScaleBlock; };
  tensors.push_back({name + ".weight", msg::DType::F8E4M3, {rows, columns}});
  tensors.push_back({name + ".weight_scale_inv", msg::DType::F32, {blocks(rows), blocks(columns)}});
}

std::vector<TensorSpec> deepSeekV3(int layers) {
  constexpr auto bf16 = msg::DType::BF16;
  std::vector<TensorSpec> tensors;
  tensors.push_back({"model.embed_tokens.weight", bf16, {kDeepSeekVocab, kDeepSeekHidden}});
  for (int layer = 0; layer < layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    // DeepseekV3Attention registers q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
    // kv_b_proj, o_proj.
    deepSeekLinear(tensors, prefix + "self_attn.q_a_proj", kDeepSeekQueryRank, kDeepSeekHidden);
    tensors.push_back({prefix + "self_attn.q_a_layernorm.weight", bf16, {kDeepSeekQueryRank}});
    deepSeekLinear(tensors, prefix + "self_attn.q_b_proj", kDeepSeekHeads * (kDeepSeekHeadDim + kDeepSeekRopeDim),
                   kDeepSeekQueryRank);
    deepSeekLinear(tensors, prefix + "self_attn.kv_a_proj_with_mqa", kDeepSeekKeyValueRank + kDeepSeekRopeDim,
                   kDeepSeekHidden);
    tensors.push_back({prefix + "self_attn.kv_a_layernorm.weight", bf16, {kDeepSeekKeyValueRank}});
    deepSeekLinear(tensors, prefix + "self_attn.kv_b_proj", kDeepSeekHeads * 2 * kDeepSeekHeadDim,
                   kDeepSeekKeyValueRank);
    deepSeekLinear(tensors, prefix + "self_attn.o_proj", kDeepSeekHidden, kDeepSeekHeads * kDeepSeekHeadDim);
    const auto mlp = [&](const std::string& name, std::int64_t intermediate) {
      deepSeekLinear(tensors, name + ".gate_proj", intermediate, kDeepSeekHidden);
      deepSeekLinear(tensors, name + ".up_proj", intermediate, kDeepSeekHidden);
      deepSeekLinear(tensors, name + ".down_proj", kDeepSeekHidden, intermediate);
    };
    if (layer < kDeepSeekDenseLayers) {
      mlp(prefix + "mlp", kDeepSeekDenseIntermediate);
    } else {
      // DeepseekV3MoE registers the experts, then the router (MoEGate: weight, e_score_correction_bias), then the
      // shared expert.
      for (int expert = 0; expert < kDeepSeekExperts; ++expert) {
        mlp(prefix + "mlp.experts." + std::to_string(expert), kDeepSeekExpertIntermediate);
      }
      tensors.push_back({prefix + "mlp.gate.weight", bf16, {kDeepSeekExperts, kDeepSeekHidden}});
      tensors.push_back({prefix + "mlp.gate.e_score_correction_bias", msg::DType::F32, {kDeepSeekExperts}});
      mlp(prefix + "mlp.shared_experts", kDeepSeekExpertIntermediate);
    }
    tensors.push_back({prefix + "input_layernorm.weight", bf16, {kDeepSeekHidden}});
    tensors.push_back({prefix + "post_attention_layernorm.weight", bf16, {kDeepSeekHidden}});
  }
  tensors.push_back({"model.norm.weight", bf16, {kDeepSeekHidden}});
  tensors.push_back({"lm_head.weight", bf16, {kDeepSeekVocab, kDeepSeekHidden}});  // not tied to embed_tokens
  return tensors;
}

// ---- tiny -----------------------------------------------------------------------------------------------------

std::vector<TensorSpec> tiny() {
  return {
      {"embed.weight", msg::DType::BF16, {64, 16}},             // 2048 bytes
      {"layers.0.attn.qkv.weight", msg::DType::F16, {48, 16}},  // 1536
      {"layers.0.attn.qkv.bias", msg::DType::F32, {48}},        // 192
      {"layers.0.mlp.weight", msg::DType::BF16, {7, 33}},       // 462: not a multiple of 8, to exercise tails
      {"layers.0.norm.weight", msg::DType::F32, {16}},          // 64
      {"layers.0.router.unused", msg::DType::BF16, {0, 16}},    // 0: zero-byte tensors are legal and get no piece
      {"step", msg::DType::I64, {}},                            // 8: a scalar
      {"final_norm.bias", msg::DType::F32, {3}},                // 12
  };
}

// ---- content --------------------------------------------------------------------------------------------------

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;  // splitmix64's increment, 2^64 / phi
constexpr std::uint64_t kVersionSalt = 0xD1B54A32D192ED03ULL;

// splitmix64's finaliser: a bijection of 64-bit words whose outputs for consecutive inputs look independent.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t tensorKey(std::uint64_t seed, std::uint32_t tensorIndex) {
  return mix64(mix64(seed) + (std::uint64_t{tensorIndex} + 1) * kGolden);
}

// Writes the bytes of `version` at out[begin, begin + length), length 1..8. The first and the last of them are a
// per-offset constant plus the version (mod 256), so they differ between consecutive versions without fail; the
// bytes between are a hash of the version, so versions 256 apart differ too.
void writePerturbation(std::span<std::byte> out, std::size_t begin, std::size_t length, std::uint64_t tensor,
                       std::uint64_t versionKey, std::uint64_t version) {
  std::uint64_t word = mix64(versionKey + begin * kGolden);
  std::memcpy(out.data() + begin, &word, length);
  const std::uint64_t guard = (tensor ^ begin) * kGolden;
  out[begin] = static_cast<std::byte>((guard >> 56) + version);
  out[begin + length - 1] = static_cast<std::byte>((guard >> 48) + version);
}

// ---- synthetic ------------------------------------------------------------------------------------------------

struct SyntheticKind {
  std::string_view suffix;
  bool matrix;           // 2-D, else 1-D
  std::uint32_t weight;  // relative size, as in a Llama-style layer with grouped KV heads
};
// Norms are vectors, K and V a quarter of Q, the MLP about 2.7x attention: sizes over two orders of magnitude.
constexpr std::array<SyntheticKind, 9> kSyntheticLayer{{
    {"attn_norm", false, 1},
    {"wq", true, 16},
    {"wk", true, 4},
    {"wv", true, 4},
    {"wo", true, 16},
    {"ffn_norm", false, 1},
    {"w1", true, 44},
    {"w2", true, 44},
    {"w3", true, 44},
}};
constexpr std::uint64_t kSyntheticSeed = 0x5EED5EED5EED5EEDULL;

std::optional<std::uint64_t> parseDecimal(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

tl::expected<std::vector<TensorSpec>, ModelCatalogFailure> synthetic(std::string_view name) {
  const std::string_view arguments = name.substr(kSyntheticPrefix.size());
  const std::size_t colon = arguments.find(':');
  const auto count = parseDecimal(arguments.substr(0, colon));
  const auto mebibytes = colon == std::string_view::npos ? std::nullopt : parseDecimal(arguments.substr(colon + 1));
  if (!count || !mebibytes) {
    return fail(ModelCatalogError::InvalidSyntheticSpec,
                "'" + std::string(name) + "' is not synthetic:COUNT:MIB with two decimal numbers");
  }
  constexpr std::uint64_t kMaxMebibytes = bus::kMaxManifestBytes >> 20;
  if (*count < 1 || *count > bus::kMaxTensors || *mebibytes < 1 || *mebibytes > kMaxMebibytes) {
    return fail(ModelCatalogError::InvalidSyntheticSpec, "'" + std::string(name) + "': COUNT must be 1.." +
                                                             std::to_string(kMaxTensors) + " and MIB 1.." +
                                                             std::to_string(kMaxMebibytes));
  }
  const std::uint64_t totalBytes = *mebibytes << 20;
  if (totalBytes / *count < kMinSyntheticBytesPerTensor) {
    return fail(ModelCatalogError::InvalidSyntheticSpec,
                "'" + std::string(name) + "': " + std::to_string(*mebibytes) + " MiB cannot hold " +
                    std::to_string(*count) + " tensors of " + std::to_string(kMinSyntheticBytesPerTensor) +
                    " bytes on average");
  }

  // Each tensor's share of the total: its kind's weight times a jitter of 0.5x..1.5x, so layers are not all alike.
  std::vector<std::uint32_t> weights(*count);
  std::vector<std::uint32_t> columns(*count);
  __extension__ using Wide = unsigned __int128;  // elements x summed weights needs up to 80 bits
  Wide weightSum = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const std::uint64_t random = mix64(kSyntheticSeed + (i + 1) * kGolden);
    weights[i] = kSyntheticLayer[i % kSyntheticLayer.size()].weight * (512 + static_cast<std::uint32_t>(random % 1024));
    columns[i] = 128 * (1 + static_cast<std::uint32_t>((random >> 32) % 32));  // 128..4096, like hidden sizes
    weightSum += weights[i];
  }

  // Each tensor takes what brings the running total to its cumulative share, so rounding never accumulates: the
  // only error left is the last tensor's, which takes the exact rest.
  const std::uint64_t totalElements = totalBytes / 2;  // BF16
  std::vector<TensorSpec> tensors;
  tensors.reserve(weights.size());
  Wide weightSoFar = 0;
  std::uint64_t elementsSoFar = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    weightSoFar += weights[i];
    const auto target = static_cast<std::uint64_t>(Wide{totalElements} * weightSoFar / weightSum);
    const std::uint64_t need = target > elementsSoFar ? target - elementsSoFar : 1;
    const SyntheticKind& kind = kSyntheticLayer[i % kSyntheticLayer.size()];
    TensorSpec tensor{
        "layers." + std::to_string(i / kSyntheticLayer.size()) + "." + std::string(kind.suffix), msg::DType::BF16, {}};
    const bool last = i + 1 == weights.size();
    if (kind.matrix && !last && need >= 8) {
      const std::uint64_t cols = std::min<std::uint64_t>(columns[i], need / 4);
      tensor.shape = {static_cast<std::int64_t>(need / cols), static_cast<std::int64_t>(cols)};
      elementsSoFar += (need / cols) * cols;
    } else {
      tensor.shape = {static_cast<std::int64_t>(need)};
      elementsSoFar += need;
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

}  // namespace

std::string_view toString(ModelCatalogError error) {
  switch (error) {
    case ModelCatalogError::UnknownModel:
      return "unknown model";
    case ModelCatalogError::InvalidSyntheticSpec:
      return "invalid synthetic model";
    case ModelCatalogError::InvalidLayerCount:
      return "invalid layer count";
  }
  return "unknown model catalog error";
}

std::span<const std::string_view> knownModels() { return kKnownModels; }

tl::expected<std::vector<TensorSpec>, ModelCatalogFailure> modelTensors(std::string_view name) {
  if (name == "opt-125m") return opt125m();
  if (name == "qwen2.5-7b") return qwen25Dense();
  if (name == "qwen3-30b-a3b") return qwen3Moe();
  if (name == "tiny") return tiny();
  if (name.starts_with(kSyntheticPrefix)) return synthetic(name);
  if (name.starts_with(kDeepSeekPrefix)) {
    const auto layers = parseDecimal(name.substr(kDeepSeekPrefix.size()));
    if (!layers || *layers < 1 || *layers > kDeepSeekLayers) {
      return fail(ModelCatalogError::InvalidLayerCount,
                  "'" + std::string(name) + "': LAYERS must be 1.." + std::to_string(kDeepSeekLayers) + ", in decimal");
    }
    return deepSeekV3(static_cast<int>(*layers));
  }
  std::string known;
  for (std::string_view model : kKnownModels) known += (known.empty() ? "" : ", ") + std::string(model);
  return fail(ModelCatalogError::UnknownModel, "'" + std::string(name) + "'; known models: " + known);
}

void fillTensor(std::span<std::byte> out, std::uint64_t seed, std::uint32_t tensorIndex) {
  const std::uint64_t key = tensorKey(seed, tensorIndex);
  std::byte* cursor = out.data();
  std::byte* const wordsEnd = cursor + (out.size() & ~std::size_t{7});
  std::uint64_t state = key;
  for (; cursor != wordsEnd; cursor += 8) {
    state += kGolden;
    const std::uint64_t word = mix64(state);
    std::memcpy(cursor, &word, 8);
  }
  if (const std::size_t tail = out.size() & 7; tail != 0) {
    const std::uint64_t word = mix64(state + kGolden);
    std::memcpy(cursor, &word, tail);
  }
  perturbTensor(out, seed, tensorIndex, 0);  // the perturbed words of version 0, so that every version is alike
}

void perturbTensor(std::span<std::byte> out, std::uint64_t seed, std::uint32_t tensorIndex, std::uint64_t version) {
  if (out.empty()) return;
  const std::uint64_t key = tensorKey(seed, tensorIndex);
  const std::uint64_t versionKey = mix64(key ^ mix64(version ^ kVersionSalt));
  const std::size_t size = out.size();
  for (std::size_t begin = 0; begin < size; begin += kPerturbStride) {
    writePerturbation(out, begin, std::min<std::size_t>(8, size - begin), key, versionKey, version);
  }
  // The last bytes too: a bucket that holds only the end of a tensor, short of a stride, still sees a change.
  const std::size_t tailBegin = size > 8 ? size - 8 : 0;
  writePerturbation(out, tailBegin, size - tailBegin, key, versionKey, version);
}

}  // namespace wsync::cli
