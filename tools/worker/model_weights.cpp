#include "model_weights.hpp"

#include <cstring>

#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::worker_app {

namespace {

constexpr std::string_view kFilePrefix = "file:";
// Each tensor starts on a cache line, as an engine's allocator would place it.
constexpr std::size_t kWeightAlignment = 64;

std::uint64_t mix(std::uint64_t value) {  // splitmix64's finaliser: spreads the reads over the weights
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

}  // namespace

tl::expected<ModelWeights, ModelError> ModelWeights::load(std::string_view model, std::optional<int> cudaDevice,
                                                          std::optional<cli::Part> slice) {
  std::vector<bus::TensorSpec> specs;
  if (model.starts_with(kFilePrefix)) {
    const std::string path(model.substr(kFilePrefix.size()));
    auto file = cli::SafetensorsFile::open(path);
    if (!file) return tl::unexpected(ModelError{false, file.error().describe()});
    specs = file->tensors();
  } else {
    auto listed = cli::modelTensors(model);
    if (!listed) return tl::unexpected(ModelError{true, listed.error().describe()});
    specs = std::move(*listed);
  }
  ModelWeights weights;
  if (slice) {
    weights.slices_ = cli::columnSlices(specs, *slice);
    for (std::size_t index = 0; index < specs.size(); ++index) specs[index] = weights.slices_[index].local;
  }
  auto manifest = bus::Manifest::create(specs);
  if (!manifest)
    return tl::unexpected(ModelError{false, "model '" + std::string(model) + "': " + manifest.error().describe()});
  std::size_t offset = 0;
  for (std::size_t index = 0; index < specs.size(); ++index) {
    const auto size = static_cast<std::size_t>(manifest->tensorBytes(index));
    weights.offsets_.push_back(offset);
    weights.sizes_.push_back(size);
    if (size > 0) weights.nonEmpty_.push_back(index);
    offset += (size + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
  }
  weights.block_ = std::make_unique<std::byte[]>(offset);  // zeroed: version 0 of every model is all zeros
  if (cudaDevice) {
    auto device = bus::DeviceBlock::allocate(*cudaDevice, offset);  // zeroed too
    if (!device)
      return tl::unexpected(ModelError{false, "weights on GPU " + std::to_string(*cudaDevice) + ": " + device.error()});
    weights.device_ = std::move(*device);
  }
  weights.totalBytes_ = manifest->totalBytes();
  weights.tensors_ = std::move(specs);
  return weights;
}

void ModelWeights::skewSlices(std::int64_t columns) {
  for (cli::SlicedTensor& slice : slices_) {
    if (slice.sliced) slice.region.offset.back() += columns;
  }
}

tl::expected<void, worker_agent::WorkerFailure> ModelWeights::bindAll(worker_agent::WorkerBindings& bindings) const {
  for (std::size_t index = 0; index < tensors_.size(); ++index) {
    const auto& spec = tensors_[index];
    const std::span<std::byte> destination =
        onDevice() ? std::span<std::byte>(device_.data() + offsets_[index], sizes_[index]) : bytes(index);
    if (auto bound = bindings.bind(spec.name, spec.dtype, spec.shape, destination); !bound) return bound;
    if (!slices_.empty() && slices_[index].sliced) {
      // The checkpoint tensor of the same name, its columns of this rank, into the whole local tensor.
      if (auto bound = bindings.bindRegion(spec.name, slices_[index].region, spec.name,
                                           std::vector<std::int64_t>(spec.shape.size(), 0), spec.shape);
          !bound) {
        return bound;
      }
    }
  }
  return {};
}

std::uint64_t ModelWeights::sample(std::uint64_t salt) const {
  if (nonEmpty_.empty()) return 0;
  const std::uint64_t hash = mix(salt);
  const std::size_t index = nonEmpty_[hash % nonEmpty_.size()];
  const std::size_t size = sizes_[index];
  const std::size_t take = std::min<std::size_t>(size, sizeof(std::uint64_t));
  const std::size_t at = static_cast<std::size_t>(mix(hash) % (size - take + 1));
  std::uint64_t word = 0;
  if (onDevice()) {
    // A copy of 8 bytes per token: the stand-in engine's read of its weights, which a real one does with kernels.
    (void)device_.download(offsets_[index] + at, std::span<std::byte>(reinterpret_cast<std::byte*>(&word), take));
    return word;
  }
  std::memcpy(&word, block_.get() + offsets_[index] + at, take);
  return word;
}

tl::expected<void, std::string> ModelWeights::dump(const std::filesystem::path& path, std::uint64_t version) const {
  if (onDevice()) {
    // The host block is only the dump's staging then.
    if (auto copied = device_.download(0, std::span<std::byte>(block_.get(), device_.size())); !copied) {
      return tl::unexpected("reading the weights back from the GPU: " + copied.error());
    }
  }
  std::vector<std::span<const std::byte>> data;
  data.reserve(tensors_.size());
  for (std::size_t index = 0; index < tensors_.size(); ++index) data.emplace_back(bytes(index));
  auto written = cli::writeSafetensors(path, tensors_, data, {{"wsync_version", std::to_string(version)}});
  if (!written) return tl::unexpected(written.error().describe());
  return {};
}

}  // namespace wsync::worker_app
