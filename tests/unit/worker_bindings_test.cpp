// Bindings: every malformed binding is refused naming its tensor, and the manifest check a worker makes before it
// pauses names the first tensor that differs and both sides of the difference.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "wsync/worker_agent/worker_bindings.hpp"

namespace wsync::worker_agent {
namespace {

using msg::DType;

// Destination buffers that outlive the bindings made from them.
struct Buffers {
  std::vector<std::vector<std::byte>> storage;
  std::span<std::byte> make(std::size_t bytes) { return storage.emplace_back(bytes); }
};

bus::Manifest manifestOf(std::vector<bus::TensorSpec> tensors) {
  auto manifest = bus::Manifest::create(std::move(tensors));
  if (!manifest) throw std::runtime_error(manifest.error().describe());  // a broken fixture, not a finding
  return std::move(*manifest);
}

WorkerBindings bindAll(Buffers& buffers, const std::vector<bus::TensorSpec>& tensors) {
  WorkerBindings bindings;
  for (const auto& spec : tensors) {
    std::uint64_t bytes = spec.dtype == DType::F32 ? 4 : spec.dtype == DType::I64 ? 8 : 2;
    for (const auto dim : spec.shape) bytes *= static_cast<std::uint64_t>(dim);
    auto bound = bindings.bind(spec.name, spec.dtype, spec.shape, buffers.make(bytes));
    EXPECT_TRUE(bound.has_value()) << bound.error().describe();
  }
  return bindings;
}

std::vector<bus::TensorSpec> layer() {
  return {{"model.decoder.layers.0.fc1.weight", DType::F16, {3072, 768}},
          {"model.decoder.layers.0.fc1.bias", DType::F16, {3072}},
          {"model.decoder.layers.0.final_layer_norm.weight", DType::F32, {768}},
          {"step", DType::I64, {}}};
}

void expectBindingError(const tl::expected<void, WorkerFailure>& result, const std::string& fragment) {
  ASSERT_FALSE(result.has_value()) << "expected a refusal containing: " << fragment;
  EXPECT_EQ(result.error().code, WorkerError::InvalidBinding);
  EXPECT_NE(result.error().detail.find(fragment), std::string::npos) << result.error().detail;
}

TEST(WorkerBindings, BindsAndFindsByName) {
  Buffers buffers;
  WorkerBindings bindings = bindAll(buffers, layer());
  EXPECT_EQ(bindings.size(), 4U);
  EXPECT_EQ(bindings.totalBytes(), 3072U * 768U * 2U + 3072U * 2U + 768U * 4U + 8U);
  EXPECT_EQ(bindings.find("step"), 3U);
  EXPECT_EQ(bindings.tensors()[1].spec.name, "model.decoder.layers.0.fc1.bias");
  EXPECT_EQ(bindings.tensors()[1].destination.data(), buffers.storage[1].data());
  EXPECT_FALSE(bindings.find("missing").has_value());
}

TEST(WorkerBindings, AcceptsScalarsAndEmptyTensors) {
  Buffers buffers;
  WorkerBindings bindings;
  EXPECT_TRUE(bindings.bind("scalar", DType::F32, {}, buffers.make(4)).has_value());
  EXPECT_TRUE(bindings.bind("empty", DType::BF16, {0, 16}, {}).has_value());
  EXPECT_EQ(bindings.totalBytes(), 4U);
}

TEST(WorkerBindings, RefusesMalformedBindingsNamingTheTensor) {
  Buffers buffers;
  WorkerBindings bindings;
  ASSERT_TRUE(bindings.bind("fc1.weight", DType::F16, {4, 8}, buffers.make(64)).has_value());

  expectBindingError(bindings.bind("fc1.weight", DType::F16, {4, 8}, buffers.make(64)),
                     "tensor 'fc1.weight': bound twice");
  expectBindingError(bindings.bind("", DType::F16, {1}, buffers.make(2)), "empty");
  expectBindingError(bindings.bind(std::string(bus::kMaxTensorNameBytes + 1, 'x'), DType::F16, {1}, buffers.make(2)),
                     "has a name of 1025 bytes, over 1024");
  expectBindingError(bindings.bind("w", DType::Unknown, {1}, buffers.make(2)), "tensor 'w': unknown dtype");
  expectBindingError(bindings.bind("w", static_cast<DType>(200), {1}, buffers.make(2)), "unknown dtype 200");
  expectBindingError(bindings.bind("w", DType::F16, {4, -1}, buffers.make(2)), "tensor 'w': shape [4, -1]");
  expectBindingError(bindings.bind("w", DType::F16, {1LL << 40, 1LL << 40}, buffers.make(2)), "too large");
  expectBindingError(
      bindings.bind("w", DType::F16, std::vector<std::int64_t>(bus::kMaxTensorRank + 1, 1), buffers.make(2)),
      "dimensions");
  expectBindingError(bindings.bind("fc2.weight", DType::BF16, {8, 4}, buffers.make(63)),
                     "tensor 'fc2.weight': BF16 [8, 4] needs 64 bytes, the bound span has 63");
  // Refusals leave the bindings as they were.
  EXPECT_EQ(bindings.size(), 1U);
  EXPECT_EQ(bindings.totalBytes(), 64U);
}

// A worker can bind only names a manifest can carry, and is told why in the manifest's own words: a name the
// coordinator would refuse (or, before, cut at a NUL) must not be bindable.
TEST(WorkerBindings, RefusesNamesAsTheManifestDoes) {
  using namespace std::string_literals;
  Buffers buffers;
  WorkerBindings bindings;
  for (const std::string& name : {"nul\0inside"s, "\0lead"s, "tab\there"s, "del\x7f"s, "caf\xe9.weight"s,
                                  "cut\xe6\xa8"s, ""s, std::string(bus::kMaxTensorNameBytes + 1, 'x')}) {
    const auto expected = bus::validateTensorName(name);
    ASSERT_FALSE(expected.has_value());
    const auto bound = bindings.bind(name, DType::F16, {1}, buffers.make(2));
    ASSERT_FALSE(bound.has_value());
    EXPECT_EQ(bound.error().code, WorkerError::InvalidBinding);
    EXPECT_EQ(bound.error().detail, expected.error().detail);
  }
  EXPECT_EQ(bindings.bind("nul\0inside"s, DType::F16, {1}, buffers.make(2)).error().detail,
            "tensor 'nul\\x00inside' has a NUL byte at offset 3");
  EXPECT_EQ(bindings.size(), 0U);
  EXPECT_TRUE(bindings.bind("模型.层.0.权重", DType::F16, {1}, buffers.make(2)).has_value());
}

// Two names over shared bytes would each be written with a version's bytes of their own, one after the other: the
// first would end up holding the second's while the round reports both applied. Refused, naming both tensors, for
// any overlap (the same span, a part, one inside or around another, found before or after it in memory); spans
// that only touch, and empty ones, are fine.
TEST(WorkerBindings, RefusesMemoryThatAnotherBindingHoldsNamingBoth) {
  std::vector<std::byte> storage(256);
  const auto at = [&](std::size_t offset, std::size_t bytes) { return std::span(storage).subspan(offset, bytes); };
  WorkerBindings bindings;
  ASSERT_TRUE(bindings.bind("a", DType::F32, {4}, at(64, 16)).has_value());   // [64, 80)
  ASSERT_TRUE(bindings.bind("c", DType::F32, {8}, at(128, 32)).has_value());  // [128, 160)

  const std::string aRange = formatRange(at(64, 16));
  expectBindingError(bindings.bind("b", DType::F32, {4}, at(64, 16)),
                     "tensor 'b': memory " + aRange + " overlaps that of tensor 'a' " + aRange);
  expectBindingError(bindings.bind("tail", DType::F32, {2}, at(72, 8)), "overlaps that of tensor 'a'");      // inside
  expectBindingError(bindings.bind("head", DType::F32, {4}, at(56, 16)), "overlaps that of tensor 'a'");     // before
  expectBindingError(bindings.bind("around", DType::F32, {16}, at(48, 64)), "overlaps that of tensor 'a'");  // around
  expectBindingError(bindings.bind("into.c", DType::F32, {4}, at(144, 16)), "overlaps that of tensor 'c'");
  expectBindingError(bindings.bind("last.byte", DType::U8, {1}, at(159, 1)), "overlaps that of tensor 'c'");
  // Across both: the one found first is named, either way.
  const auto both = bindings.bind("both", DType::F32, {32}, at(72, 128));
  ASSERT_FALSE(both.has_value());
  EXPECT_EQ(both.error().code, WorkerError::InvalidBinding);
  EXPECT_TRUE(both.error().detail.find("tensor 'a'") != std::string::npos ||
              both.error().detail.find("tensor 'c'") != std::string::npos)
      << both.error().detail;
  EXPECT_EQ(bindings.size(), 2U);  // refusals bind nothing

  // Spans that touch share no byte; an empty one at any address shares none either.
  EXPECT_TRUE(bindings.bind("before.a", DType::F32, {4}, at(48, 16)).has_value());  // [48, 64)
  EXPECT_TRUE(bindings.bind("after.a", DType::F32, {12}, at(80, 48)).has_value());  // [80, 128)
  EXPECT_TRUE(bindings.bind("empty.in.a", DType::F32, {0}, at(64, 0)).has_value());
  EXPECT_TRUE(bindings.bind("empty.too", DType::F32, {0, 4}, at(64, 0)).has_value());
  EXPECT_EQ(bindings.size(), 6U);
  EXPECT_EQ(bindings.overlapping(at(100, 1)), bindings.find("after.a"));
  EXPECT_FALSE(bindings.overlapping(at(160, 96)).has_value());
  EXPECT_FALSE(bindings.overlapping(at(70, 0)).has_value());
}

// What the check costs stays O(log n) a tensor, so a frontier MoE's 100,000 tensors (views of one flat buffer, as
// FSDP's flat parameters or a packed engine's weights hold them) bind without a quadratic pass; and an overlap
// deep in such a layout is still found.
TEST(WorkerBindings, FindsAnOverlapAmongAHundredThousandAdjacentTensors) {
  constexpr std::size_t kTensors = 100'000;
  constexpr std::size_t kBytes = 8;
  std::vector<std::byte> storage(kTensors * kBytes);
  WorkerBindings bindings;
  // Bound from the end backwards, so that each new span is found before the ones already bound.
  for (std::size_t index = kTensors; index-- > 0;) {
    const auto bound = bindings.bind("layers." + std::to_string(index), DType::F32, {2},
                                     std::span(storage).subspan(index * kBytes, kBytes));
    ASSERT_TRUE(bound.has_value()) << bound.error().describe();
  }
  expectBindingError(bindings.bind("straddles", DType::F32, {2}, std::span(storage).subspan(54'321 * kBytes + 4, 8)),
                     "tensor 'straddles': memory");
  const auto straddling = bindings.overlapping(std::span(storage).subspan(54'321 * kBytes + 4, 8));
  ASSERT_TRUE(straddling.has_value());
  const std::string& name = bindings.tensors()[*straddling].spec.name;
  EXPECT_TRUE(name == "layers.54321" || name == "layers.54322") << name;
}

TEST(MatchManifest, MapsManifestOrderToBindingOrder) {
  Buffers buffers;
  auto bound = layer();
  WorkerBindings bindings = bindAll(buffers, bound);
  auto manifestOrder = layer();
  std::swap(manifestOrder[0], manifestOrder[3]);
  std::swap(manifestOrder[1], manifestOrder[2]);
  auto map = matchManifest(manifestOf(manifestOrder), bindings);
  ASSERT_TRUE(map.has_value()) << map.error().describe();
  EXPECT_EQ(*map, (BindingMap{3, 2, 1, 0}));
}

void expectMismatch(const tl::expected<BindingMap, WorkerFailure>& result, const std::string& detail) {
  ASSERT_FALSE(result.has_value()) << "expected: " << detail;
  EXPECT_EQ(result.error().code, WorkerError::ManifestMismatch);
  EXPECT_EQ(result.error().detail, detail);
}

TEST(MatchManifest, NamesATransposedShape) {
  Buffers buffers;
  auto bound = layer();
  bound[0].shape = {768, 3072};
  WorkerBindings bindings = bindAll(buffers, bound);
  expectMismatch(matchManifest(manifestOf(layer()), bindings),
                 "tensor 'model.decoder.layers.0.fc1.weight': manifest shape [3072, 768], bound [768, 3072]");
}

TEST(MatchManifest, NamesADifferentRank) {
  Buffers buffers;
  auto bound = layer();
  bound[3].shape = {1};
  WorkerBindings bindings = bindAll(buffers, bound);
  expectMismatch(matchManifest(manifestOf(layer()), bindings), "tensor 'step': manifest shape [], bound [1]");
}

TEST(MatchManifest, NamesADifferentDtype) {
  Buffers buffers;
  auto bound = layer();
  bound[1].dtype = DType::BF16;  // same size, other type: still wrong
  WorkerBindings bindings = bindAll(buffers, bound);
  expectMismatch(matchManifest(manifestOf(layer()), bindings),
                 "tensor 'model.decoder.layers.0.fc1.bias': manifest dtype F16, bound BF16");
}

TEST(MatchManifest, NamesATensorThatIsNotBound) {
  Buffers buffers;
  auto bound = layer();
  bound.erase(bound.begin() + 2);
  WorkerBindings bindings = bindAll(buffers, bound);
  expectMismatch(matchManifest(manifestOf(layer()), bindings),
                 "manifest has 4 tensors, 3 are bound; tensor 'model.decoder.layers.0.final_layer_norm.weight': in "
                 "the manifest but not bound");
}

TEST(MatchManifest, NamesABoundTensorMissingFromTheManifest) {
  Buffers buffers;
  WorkerBindings bindings = bindAll(buffers, layer());
  auto manifest = layer();
  manifest.erase(manifest.begin() + 1);
  expectMismatch(matchManifest(manifestOf(manifest), bindings),
                 "manifest has 3 tensors, 4 are bound; tensor 'model.decoder.layers.0.fc1.bias': bound but not in "
                 "the manifest");
}

TEST(MatchManifest, NamesARenamedTensorWhenTheCountsAgree) {
  Buffers buffers;
  auto bound = layer();
  bound[2].name = "model.decoder.layers.0.final_layer_norm.w";
  WorkerBindings bindings = bindAll(buffers, bound);
  expectMismatch(matchManifest(manifestOf(layer()), bindings),
                 "tensor 'model.decoder.layers.0.final_layer_norm.weight': in the manifest but not bound");
}

TEST(FormatShape, WritesBrackets) {
  EXPECT_EQ(formatShape(std::vector<std::int64_t>{}), "[]");
  EXPECT_EQ(formatShape(std::vector<std::int64_t>{3072, 768}), "[3072, 768]");
}

}  // namespace
}  // namespace wsync::worker_agent
