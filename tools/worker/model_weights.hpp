#pragma once
// The stand-in engine's weights: real, zero-initialised buffers (version 0) with the shapes of a named model,
// bound to the worker agent, and written out as safetensors on request. On a GPU (nccl, cuda_ipc) the bound
// buffers are one device block laid out like the host one, which then only serves reading and dumping.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/channel/device_block.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/model_layouts.hpp"
#include "wsync/worker_agent/worker_bindings.hpp"

namespace wsync::worker_app {

struct ModelError {
  bool usage = false;  // the name itself is wrong (exit 2), not a file that cannot be read (exit 1)
  std::string detail;
};

class ModelWeights {
 public:
  // "opt-125m", "tiny", "synthetic:COUNT:MIB" (bus/model_catalog.hpp) or "file:PATH.safetensors" (its shapes).
  // With `cudaDevice`, the weights live on that GPU. With `slice`, this worker is one rank of a tensor-parallel
  // engine and holds only its columns of each tensor (cli::columnSlices): tensors() are its local tensors.
  static tl::expected<ModelWeights, ModelError> load(std::string_view model, std::optional<int> cudaDevice = {},
                                                     std::optional<cli::Part> slice = {});

  const std::vector<bus::TensorSpec>& tensors() const { return tensors_; }
  std::uint64_t totalBytes() const { return totalBytes_; }
  std::span<std::byte> bytes(std::size_t index) const { return {block_.get() + offsets_[index], sizes_[index]}; }

  // Test only (wsync-worker --slice-skew): the region of the checkpoint each sliced tensor is bound to begins
  // `columns` later, its local tensor unchanged; past the tensor's end it is a region that no source holds. Before
  // bindAll().
  void skewSlices(std::int64_t columns);
  tl::expected<void, worker_agent::WorkerFailure> bindAll(worker_agent::WorkerBindings& bindings) const;
  // A few bytes of the weights, as a decode step would read them; `salt` picks where.
  std::uint64_t sample(std::uint64_t salt) const;
  bool onDevice() const { return device_.data() != nullptr; }
  // Writes the weights with metadata {"wsync_version": "<version>"}.
  tl::expected<void, std::string> dump(const std::filesystem::path& path, std::uint64_t version) const;

 private:
  std::vector<bus::TensorSpec> tensors_;
  std::vector<cli::SlicedTensor> slices_;  // with a slice: each local tensor's region of the checkpoint
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> nonEmpty_;  // indices of tensors with at least one byte, for sample()
  std::uint64_t totalBytes_ = 0;
  std::unique_ptr<std::byte[]> block_;
  bus::DeviceBlock device_;  // empty unless on a GPU
};

}  // namespace wsync::worker_app
