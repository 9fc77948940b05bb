// The model catalog: opt-125m, Qwen2.5-7B and Qwen3-30B-A3B as transformers lists them, the tiny and synthetic
// models, and the content contract of fillTensor/perturbTensor (deterministic, history-free, and changing every run
// of a stride between versions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/cli/model_catalog.hpp"

namespace wsync::cli {
namespace {

// The catalog and the files speak in the bus's tensor specs, manifests and bucket plans.
using namespace wsync::bus;

std::uint64_t bytesOf(const TensorSpec& tensor) {
  std::uint64_t bytes = elementBytes(tensor.dtype);
  for (std::int64_t dim : tensor.shape) bytes *= static_cast<std::uint64_t>(dim);
  return bytes;
}

std::vector<std::byte> filled(std::size_t size, std::uint64_t seed, std::uint32_t index) {
  std::vector<std::byte> bytes(size);
  fillTensor(bytes, seed, index);
  return bytes;
}

TEST(ModelCatalog, Opt125mMatchesTransformers) {
  auto tensors = modelTensors("opt-125m");
  ASSERT_TRUE(tensors.has_value()) << tensors.error().describe();
  // 2 embeddings + final_layer_norm (2) + 12 layers x 16 (4 projections x 2, 2 norms x 2, fc1 x 2, fc2 x 2).
  ASSERT_EQ(tensors->size(), 196U);
  EXPECT_EQ(tensors->front(), (TensorSpec{"model.decoder.embed_tokens.weight", msg::DType::F16, {50272, 768}}));
  EXPECT_EQ((*tensors)[1], (TensorSpec{"model.decoder.embed_positions.weight", msg::DType::F16, {2050, 768}}));
  EXPECT_EQ((*tensors)[2].name, "model.decoder.final_layer_norm.weight");
  EXPECT_EQ((*tensors)[3].name, "model.decoder.final_layer_norm.bias");
  EXPECT_EQ((*tensors)[4], (TensorSpec{"model.decoder.layers.0.self_attn.k_proj.weight", msg::DType::F16, {768, 768}}));
  EXPECT_EQ((*tensors)[10].name, "model.decoder.layers.0.self_attn.out_proj.weight");
  EXPECT_EQ((*tensors)[14], (TensorSpec{"model.decoder.layers.0.fc1.weight", msg::DType::F16, {3072, 768}}));
  EXPECT_EQ((*tensors)[16], (TensorSpec{"model.decoder.layers.0.fc2.weight", msg::DType::F16, {768, 3072}}));
  EXPECT_EQ(tensors->back(), (TensorSpec{"model.decoder.layers.11.final_layer_norm.bias", msg::DType::F16, {768}}));
  EXPECT_EQ(std::count_if(tensors->begin(), tensors->end(),
                          [](const TensorSpec& tensor) { return tensor.name.find("lm_head") != std::string::npos; }),
            0);

  // Parameters: embed_tokens 50272*768 = 38,608,896; embed_positions 2050*768 = 1,574,400; final norm 1,536;
  // per layer 4*(768*768 + 768) = 2,362,368 attention + 1,536 norm + (3072*768 + 3072) = 2,362,368 fc1
  // + (768*3072 + 768) = 2,360,064 fc2 + 1,536 norm = 7,087,872, x12 = 85,054,464.
  // Total 125,239,296 parameters (the published size of OPT-125m), 250,478,592 bytes in float16.
  auto manifest = Manifest::create(*tensors);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  EXPECT_EQ(manifest->totalBytes(), 250'478'592U);
}

TEST(ModelCatalog, Qwen25DenseMatchesTransformers) {
  auto tensors = modelTensors("qwen2.5-7b");
  ASSERT_TRUE(tensors.has_value()) << tensors.error().describe();
  // embed_tokens + 28 layers x 12 (q/k/v weight and bias, o, gate, up, down, 2 norms) + norm + lm_head.
  ASSERT_EQ(tensors->size(), 339U);
  EXPECT_EQ(tensors->front(), (TensorSpec{"model.embed_tokens.weight", msg::DType::BF16, {152064, 3584}}));
  EXPECT_EQ((*tensors)[1], (TensorSpec{"model.layers.0.self_attn.q_proj.weight", msg::DType::BF16, {3584, 3584}}));
  EXPECT_EQ((*tensors)[2], (TensorSpec{"model.layers.0.self_attn.q_proj.bias", msg::DType::BF16, {3584}}));
  EXPECT_EQ((*tensors)[3], (TensorSpec{"model.layers.0.self_attn.k_proj.weight", msg::DType::BF16, {512, 3584}}));
  EXPECT_EQ((*tensors)[6], (TensorSpec{"model.layers.0.self_attn.v_proj.bias", msg::DType::BF16, {512}}));
  EXPECT_EQ((*tensors)[7].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ((*tensors)[8], (TensorSpec{"model.layers.0.mlp.gate_proj.weight", msg::DType::BF16, {18944, 3584}}));
  EXPECT_EQ((*tensors)[10], (TensorSpec{"model.layers.0.mlp.down_proj.weight", msg::DType::BF16, {3584, 18944}}));
  EXPECT_EQ((*tensors)[12].name, "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ((*tensors)[13].name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ((*tensors)[336].name, "model.layers.27.post_attention_layernorm.weight");
  EXPECT_EQ((*tensors)[337], (TensorSpec{"model.norm.weight", msg::DType::BF16, {3584}}));
  EXPECT_EQ(tensors->back(), (TensorSpec{"lm_head.weight", msg::DType::BF16, {152064, 3584}}));

  // Parameters: embed_tokens and lm_head 152064*3584 = 544,997,376 each; per layer q and o 3584*3584 = 12,845,056
  // each, q bias 3584, k and v 512*3584 = 1,835,008 each with 512-element biases, gate/up/down 18944*3584 =
  // 67,895,296 each, 2 norms of 3584: 233,057,792, x28 = 6,525,618,176; norm 3584. Total 7,615,616,512 (the
  // published 7.61B), 15,231,233,024 bytes in bfloat16.
  auto manifest = Manifest::create(*tensors);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  EXPECT_EQ(manifest->totalBytes(), 15'231'233'024U);
}

TEST(ModelCatalog, Qwen3MoeMatchesTransformers) {
  auto tensors = modelTensors("qwen3-30b-a3b");
  ASSERT_TRUE(tensors.has_value()) << tensors.error().describe();
  // embed_tokens + 48 layers x (4 projections + q/k norms + router + 128 experts x 3 + 2 norms) + norm + lm_head.
  ASSERT_EQ(tensors->size(), 18'867U);
  const auto bf16 = msg::DType::BF16;
  EXPECT_EQ(tensors->front(), (TensorSpec{"model.embed_tokens.weight", bf16, {151936, 2048}}));
  EXPECT_EQ((*tensors)[1], (TensorSpec{"model.layers.0.self_attn.q_proj.weight", bf16, {4096, 2048}}));
  EXPECT_EQ((*tensors)[2], (TensorSpec{"model.layers.0.self_attn.k_proj.weight", bf16, {512, 2048}}));
  EXPECT_EQ((*tensors)[3], (TensorSpec{"model.layers.0.self_attn.v_proj.weight", bf16, {512, 2048}}));
  EXPECT_EQ((*tensors)[4], (TensorSpec{"model.layers.0.self_attn.o_proj.weight", bf16, {2048, 4096}}));
  EXPECT_EQ((*tensors)[5], (TensorSpec{"model.layers.0.self_attn.q_norm.weight", bf16, {128}}));
  EXPECT_EQ((*tensors)[6], (TensorSpec{"model.layers.0.self_attn.k_norm.weight", bf16, {128}}));
  EXPECT_EQ((*tensors)[7], (TensorSpec{"model.layers.0.mlp.gate.weight", bf16, {128, 2048}}));
  EXPECT_EQ((*tensors)[8], (TensorSpec{"model.layers.0.mlp.experts.0.gate_proj.weight", bf16, {768, 2048}}));
  EXPECT_EQ((*tensors)[9], (TensorSpec{"model.layers.0.mlp.experts.0.up_proj.weight", bf16, {768, 2048}}));
  EXPECT_EQ((*tensors)[10], (TensorSpec{"model.layers.0.mlp.experts.0.down_proj.weight", bf16, {2048, 768}}));
  EXPECT_EQ((*tensors)[7 + 128 * 3].name, "model.layers.0.mlp.experts.127.down_proj.weight");
  EXPECT_EQ((*tensors)[8 + 128 * 3], (TensorSpec{"model.layers.0.input_layernorm.weight", bf16, {2048}}));
  EXPECT_EQ((*tensors)[9 + 128 * 3].name, "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ((*tensors)[10 + 128 * 3].name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ((*tensors)[18'864].name, "model.layers.47.post_attention_layernorm.weight");
  EXPECT_EQ((*tensors)[18'865], (TensorSpec{"model.norm.weight", bf16, {2048}}));
  EXPECT_EQ(tensors->back(), (TensorSpec{"lm_head.weight", bf16, {151936, 2048}}));
  EXPECT_EQ(std::count_if(tensors->begin(), tensors->end(),
                          [](const TensorSpec& tensor) { return tensor.name.find(".experts.") != std::string::npos; }),
            48 * 128 * 3);

  // Parameters: embed_tokens and lm_head 151936*2048 = 311,164,928 each; per layer q and o 4096*2048 = 8,388,608
  // each, k and v 512*2048 = 1,048,576 each, q/k norms 128 each, router 128*2048 = 262,144, experts
  // 128 x 3 x 768*2048 = 603,979,776, 2 norms of 2048: 623,120,640, x48 = 29,909,790,720; norm 2048.
  // Total 30,532,122,624 (the published 30.5B), 61,064,245,248 bytes in bfloat16.
  auto manifest = Manifest::create(*tensors);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  EXPECT_EQ(manifest->totalBytes(), 61'064'245'248U);
}

// The whole of DeepSeek-V3 (90,427 tensors) as the one Manifest message a worker is sent (docs/update-round.md): the
// size limit and the verifier's table budget take it with room left (Kimi-K2's 384 experts per layer are about 1.5
// times as many tensors, under the same names).
TEST(ModelCatalog, DeepSeekV3sWholeManifestIsOneControlMessage) {
  auto whole = modelTensors("deepseek-v3:61");
  ASSERT_TRUE(whole.has_value()) << whole.error().describe();
  auto manifest = Manifest::create(*whole);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  MessageBuilder builder;
  const auto bytes = builder.finish(manifest->toMessage(builder.fbb()));
  EXPECT_LT(bytes.size(), kMaxMessageBytes / 3) << bytes.size() << " bytes";
  EXPECT_LT(whole->size(), kMaxVerifierTables / 2);
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  auto back = Manifest::fromMessage(*message->as<msg::Manifest>());
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(back->digest(), manifest->digest());
  EXPECT_EQ(back->tensors(), manifest->tensors());
}

TEST(ModelCatalog, DeepSeekV3MatchesItsFp8Checkpoint) {
  auto whole = modelTensors("deepseek-v3:61");
  ASSERT_TRUE(whole.has_value()) << whole.error().describe();
  // embed_tokens, norm, lm_head + 3 dense layers x 20 (5 FP8 attention projections and their scales, 2 attention
  // norms, 3 MLP projections and their scales, 2 layer norms) + 58 MoE layers x 1,558 (the same attention, 256
  // experts x 3 projections x 2, the router's weight and bias, a shared expert x 6, 2 layer norms).
  ASSERT_EQ(whole->size(), 90'427U);
  auto manifest = Manifest::create(*whole);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  // Bytes, counted independently of the code above: projections 1 byte per element, scales 4 per 128 x 128 block,
  // the rest 2 (the router's bias 4). About DeepSeek-V3's 671 B parameters, in FP8.
  EXPECT_EQ(manifest->totalBytes(), 673'150'611'808U);

  auto tensors = modelTensors("deepseek-v3:8");
  ASSERT_TRUE(tensors.has_value()) << tensors.error().describe();
  ASSERT_EQ(tensors->size(), 3U + 3 * 20 + 5 * 1'558);
  auto eight = Manifest::create(*tensors);
  ASSERT_TRUE(eight.has_value()) << eight.error().describe();
  EXPECT_EQ(eight->totalBytes(), 63'017'394'944U);
  const auto& t = *tensors;
  EXPECT_EQ(t[0], (TensorSpec{"model.embed_tokens.weight", msg::DType::BF16, {129280, 7168}}));
  EXPECT_EQ(t[1], (TensorSpec{"model.layers.0.self_attn.q_a_proj.weight", msg::DType::F8E4M3, {1536, 7168}}));
  EXPECT_EQ(t[2], (TensorSpec{"model.layers.0.self_attn.q_a_proj.weight_scale_inv", msg::DType::F32, {12, 56}}));
  EXPECT_EQ(t[3], (TensorSpec{"model.layers.0.self_attn.q_a_layernorm.weight", msg::DType::BF16, {1536}}));
  EXPECT_EQ(t[4], (TensorSpec{"model.layers.0.self_attn.q_b_proj.weight", msg::DType::F8E4M3, {24576, 1536}}));
  EXPECT_EQ(t[6], (TensorSpec{"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", msg::DType::F8E4M3, {576, 7168}}));
  EXPECT_EQ(t[7].shape, (std::vector<std::int64_t>{5, 56}));  // 576 rows: a partial block counts
  EXPECT_EQ(t[9], (TensorSpec{"model.layers.0.self_attn.kv_b_proj.weight", msg::DType::F8E4M3, {32768, 512}}));
  EXPECT_EQ(t[11], (TensorSpec{"model.layers.0.self_attn.o_proj.weight", msg::DType::F8E4M3, {7168, 16384}}));
  EXPECT_EQ(t[13], (TensorSpec{"model.layers.0.mlp.gate_proj.weight", msg::DType::F8E4M3, {18432, 7168}}));
  EXPECT_EQ(t[18], (TensorSpec{"model.layers.0.mlp.down_proj.weight_scale_inv", msg::DType::F32, {56, 144}}));
  EXPECT_EQ(t[20].name, "model.layers.0.post_attention_layernorm.weight");
  // Layer 3, the first MoE layer, starts at 1 + 3 x 20: its experts follow its 12 attention tensors.
  const std::size_t moe = 1 + 3 * 20;
  EXPECT_EQ(t[moe].name, "model.layers.3.self_attn.q_a_proj.weight");
  EXPECT_EQ(t[moe + 12],
            (TensorSpec{"model.layers.3.mlp.experts.0.gate_proj.weight", msg::DType::F8E4M3, {2048, 7168}}));
  EXPECT_EQ(t[moe + 13],
            (TensorSpec{"model.layers.3.mlp.experts.0.gate_proj.weight_scale_inv", msg::DType::F32, {16, 56}}));
  EXPECT_EQ(t[moe + 12 + 6 * 255 + 4].name, "model.layers.3.mlp.experts.255.down_proj.weight");
  EXPECT_EQ(t[moe + 12 + 6 * 256], (TensorSpec{"model.layers.3.mlp.gate.weight", msg::DType::BF16, {256, 7168}}));
  EXPECT_EQ(t[moe + 12 + 6 * 256 + 1],
            (TensorSpec{"model.layers.3.mlp.gate.e_score_correction_bias", msg::DType::F32, {256}}));
  EXPECT_EQ(t[moe + 12 + 6 * 256 + 2].name, "model.layers.3.mlp.shared_experts.gate_proj.weight");
  EXPECT_EQ(t[moe + 1557].name, "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(t[t.size() - 2], (TensorSpec{"model.norm.weight", msg::DType::BF16, {7168}}));
  EXPECT_EQ(t.back(), (TensorSpec{"lm_head.weight", msg::DType::BF16, {129280, 7168}}));

  for (const char* spec : {"deepseek-v3:0", "deepseek-v3:62", "deepseek-v3:", "deepseek-v3:8x", "deepseek-v3:-1"}) {
    auto refused = modelTensors(spec);
    ASSERT_FALSE(refused.has_value()) << spec;
    EXPECT_EQ(refused.error().code, ModelCatalogError::InvalidLayerCount) << spec;
    EXPECT_NE(refused.error().describe().find("1..61"), std::string::npos) << refused.error().describe();
  }
}

TEST(ModelCatalog, TinyMixesDTypesAndShapes) {
  auto tensors = modelTensors("tiny");
  ASSERT_TRUE(tensors.has_value());
  EXPECT_EQ(tensors->size(), 8U);
  std::vector<msg::DType> dtypes;
  bool scalar = false;
  bool empty = false;
  for (const TensorSpec& tensor : *tensors) {
    dtypes.push_back(tensor.dtype);
    scalar = scalar || tensor.shape.empty();
    empty = empty || bytesOf(tensor) == 0;
  }
  for (msg::DType dtype : {msg::DType::F32, msg::DType::BF16, msg::DType::F16, msg::DType::I64}) {
    EXPECT_NE(std::find(dtypes.begin(), dtypes.end(), dtype), dtypes.end()) << safetensorsName(dtype);
  }
  EXPECT_TRUE(scalar);
  EXPECT_TRUE(empty);
  EXPECT_EQ(Manifest::create(*tensors)->totalBytes(), 4'322U);
}

TEST(ModelCatalog, EveryModelIsAValidManifest) {
  for (const char* name :
       {"opt-125m", "qwen2.5-7b", "qwen3-30b-a3b", "tiny", "synthetic:1:1", "synthetic:9:1", "synthetic:1000:64",
        "synthetic:20000:2048", "synthetic:250000:65536", "synthetic:100:1048576"}) {
    auto tensors = modelTensors(name);
    ASSERT_TRUE(tensors.has_value()) << name << ": " << tensors.error().describe();
    auto manifest = Manifest::create(*tensors);
    EXPECT_TRUE(manifest.has_value()) << name << ": " << manifest.error().describe();
  }
}

TEST(ModelCatalog, SyntheticHitsCountAndSize) {
  struct Case {
    std::uint64_t count;
    std::uint64_t mebibytes;
  };
  for (const Case& c : {Case{1, 1}, Case{2, 1}, Case{7, 3}, Case{4096, 1}, Case{1000, 64}, Case{20000, 2048},
                        Case{250000, 65536}, Case{18867, 61440}}) {
    const std::string name = "synthetic:" + std::to_string(c.count) + ":" + std::to_string(c.mebibytes);
    auto tensors = modelTensors(name);
    ASSERT_TRUE(tensors.has_value()) << name << ": " << tensors.error().describe();
    ASSERT_EQ(tensors->size(), c.count) << name;
    std::uint64_t total = 0;
    for (const TensorSpec& tensor : *tensors) {
      EXPECT_EQ(tensor.dtype, msg::DType::BF16);
      EXPECT_GT(bytesOf(tensor), 0U) << tensor.name;
      total += bytesOf(tensor);
    }
    const double wanted = static_cast<double>(c.mebibytes << 20);
    EXPECT_NEAR(static_cast<double>(total), wanted, wanted * 0.01) << name;
  }
}

TEST(ModelCatalog, SyntheticLooksLikeAModel) {
  auto tensors = modelTensors("synthetic:20000:2048");
  ASSERT_TRUE(tensors.has_value());
  EXPECT_EQ((*tensors)[0].name, "layers.0.attn_norm");
  EXPECT_EQ((*tensors)[17].name, "layers.1.w3");
  EXPECT_EQ((*tensors)[9 * 17 + 8].name, "layers.17.w3");
  std::size_t vectors = 0;
  std::size_t matrices = 0;
  std::uint64_t smallest = UINT64_MAX;
  std::uint64_t largest = 0;
  for (const TensorSpec& tensor : *tensors) {
    (tensor.shape.size() == 1 ? vectors : matrices) += 1;
    smallest = std::min(smallest, bytesOf(tensor));
    largest = std::max(largest, bytesOf(tensor));
  }
  EXPECT_GT(vectors, 1000U);
  EXPECT_GT(matrices, 10000U);
  EXPECT_GE(largest / smallest, 50U) << smallest << ".." << largest;  // about two orders of magnitude
  EXPECT_LE(largest / smallest, 1000U) << smallest << ".." << largest;
  EXPECT_EQ(*modelTensors("synthetic:20000:2048"), *tensors);  // deterministic
  EXPECT_NE(*modelTensors("synthetic:20000:2049"), *tensors);
}

TEST(ModelCatalog, RefusesUnknownNamesAndBadSpecs) {
  auto unknown = modelTensors("llama-405b");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ModelCatalogError::UnknownModel);
  EXPECT_NE(unknown.error().detail.find("'llama-405b'"), std::string::npos) << unknown.error().describe();
  for (std::string_view known : knownModels()) {
    EXPECT_NE(unknown.error().detail.find(known), std::string::npos) << unknown.error().describe();
  }
  for (const char* spec :
       {"synthetic:", "synthetic:10", "synthetic:10:", "synthetic::10", "synthetic:0:10", "synthetic:10:0",
        "synthetic:250001:100000", "synthetic:-1:10", "synthetic:+1:10", "synthetic:10:10x", "synthetic:5000:1",
        "synthetic:1:99999999999", "synthetic:99999999999999999999999:1"}) {
    auto tensors = modelTensors(spec);
    ASSERT_FALSE(tensors.has_value()) << spec;
    EXPECT_EQ(tensors.error().code, ModelCatalogError::InvalidSyntheticSpec) << spec;
    EXPECT_NE(tensors.error().detail.find(spec), std::string::npos) << tensors.error().describe();
  }
}

TEST(ModelCatalog, FillIsDeterministicAndVaries) {
  for (std::size_t size : {0UL, 1UL, 7UL, 8UL, 13UL, 256UL, 1000UL, 4099UL}) {
    EXPECT_EQ(filled(size, 42, 3), filled(size, 42, 3)) << size;
  }
  const auto base = filled(4096, 42, 3);
  EXPECT_NE(filled(4096, 43, 3), base);  // another seed
  EXPECT_NE(filled(4096, 42, 4), base);  // another tensor
  // A shorter tensor is a prefix of the longer stream, except where the perturbed words sit.
  const auto shorter = filled(1000, 42, 3);
  EXPECT_TRUE(std::equal(shorter.begin() + 8, shorter.begin() + 256, base.begin() + 8));
  // Not constant: no byte value takes over, as it would if a word were written twice or not at all.
  std::vector<int> histogram(256);
  for (std::byte byte : base) ++histogram[std::to_integer<std::size_t>(byte)];
  EXPECT_LT(*std::max_element(histogram.begin(), histogram.end()), 64);
}

TEST(ModelCatalog, PerturbDependsOnlyOnTheVersion) {
  for (std::size_t size : {1UL, 5UL, 8UL, 9UL, 255UL, 256UL, 257UL, 263UL, 264UL, 265UL, 1030UL, 70'001UL}) {
    auto direct = filled(size, 7, 11);
    perturbTensor(direct, 7, 11, 9);
    auto stepped = filled(size, 7, 11);
    for (std::uint64_t version : {1U, 2U, 300U, 5U, 9U}) perturbTensor(stepped, 7, 11, version);
    EXPECT_EQ(stepped, direct) << size;
    // Version 0 is what fillTensor writes.
    perturbTensor(stepped, 7, 11, 0);
    EXPECT_EQ(stepped, filled(size, 7, 11)) << size;
  }
}

TEST(ModelCatalog, PerturbChangesEveryStrideAndBothEnds) {
  for (std::size_t size : {1UL, 2UL, 5UL, 8UL, 9UL, 15UL, 255UL, 256UL, 257UL, 258UL, 263UL, 264UL, 265UL, 511UL,
                           1030UL, 4096UL, 10'007UL}) {
    auto previous = filled(size, 1, 2);
    for (std::uint64_t version = 1; version <= 600; ++version) {
      auto current = previous;
      perturbTensor(current, 1, 2, version);
      // changedBefore[i]: bytes that differ in [0, i).
      std::vector<std::size_t> changedBefore(size + 1, 0);
      std::size_t changedWords = 0;
      for (std::size_t i = 0; i < size; ++i) {
        changedBefore[i + 1] = changedBefore[i] + (current[i] != previous[i] ? 1 : 0);
        if (i % 8 == 0) changedWords += std::memcmp(&current[i], &previous[i], std::min<std::size_t>(8, size - i)) != 0;
      }
      ASSERT_NE(current.front(), previous.front()) << "size " << size << " version " << version;
      ASSERT_NE(current.back(), previous.back()) << "size " << size << " version " << version;
      for (std::size_t begin = 0; begin + kPerturbStride <= size; ++begin) {
        ASSERT_GT(changedBefore[begin + kPerturbStride] - changedBefore[begin], 0U)
            << "size " << size << " version " << version << ": bytes [" << begin << ", " << begin + kPerturbStride
            << ") did not change";
      }
      // About one word in 32 changes, plus the tail: the perturbation is cheap.
      EXPECT_LE(changedWords, size / kPerturbStride + 3) << size;
      previous = std::move(current);
    }
  }
}

TEST(ModelCatalog, PerturbChangesEveryBucketOfAPlan) {
  struct Case {
    std::vector<TensorSpec> tensors;
    std::uint64_t bucketBytes;
  };
  // The last two leave a bucket holding only the end of a tensor, with no stride boundary in it.
  const std::vector<Case> cases = {{*modelTensors("tiny"), 256},
                                   {*modelTensors("tiny"), 296},
                                   {{{"a", msg::DType::U8, {1000}}}, 296},
                                   {{{"a", msg::DType::BF16, {700}}, {"b", msg::DType::U8, {1000}}}, 264}};
  for (const Case& c : cases) {
    auto manifest = Manifest::create(c.tensors);
    ASSERT_TRUE(manifest.has_value());
    auto plan = BucketPlan::build(*manifest, c.bucketBytes, 8);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    std::vector<std::vector<std::byte>> previous;
    for (std::uint32_t i = 0; i < manifest->size(); ++i) previous.push_back(filled(manifest->tensorBytes(i), 5, i));
    for (std::uint64_t version = 1; version <= 300; ++version) {
      auto current = previous;
      for (std::uint32_t i = 0; i < current.size(); ++i) perturbTensor(current[i], 5, i, version);
      for (std::uint32_t bucket = 0; bucket < plan->bucketCount(); ++bucket) {
        bool changed = false;
        for (const Piece& piece : plan->piecesOfBucket(bucket)) {
          const auto begin = static_cast<std::ptrdiff_t>(piece.tensorOffset);
          const auto end = static_cast<std::ptrdiff_t>(piece.tensorOffset + piece.bytes);
          changed = changed || !std::equal(current[piece.tensor].begin() + begin, current[piece.tensor].begin() + end,
                                           previous[piece.tensor].begin() + begin);
        }
        ASSERT_TRUE(changed) << "bucket " << bucket << " of " << c.bucketBytes << " bytes, version " << version;
      }
      previous = std::move(current);
    }
  }
}

}  // namespace
}  // namespace wsync::cli
