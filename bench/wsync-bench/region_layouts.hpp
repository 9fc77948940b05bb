#pragma once
// The layouts the region benchmarks measure (regions_benchmark.cpp on cuda_ipc, shm_regions_benchmark.cpp on shm): M
// sources holding FSDP2 dim-0 shards of a catalog model, into 1 receiver binding every tensor whole or 2 binding
// tensor-parallel halves.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <wsync/bus/channel/region_plan.hpp>

namespace wsync::bench {

// Tensor-parallel half `rank` of 2, as Megatron cuts a layer: row-parallel projections (attention's output, the MLP's
// down) by their input dim, everything else of rank 2 or more by its output dim (dim 0), vectors whole.
bus::ReceiverBindings tensorParallelHalf(std::span<const bus::TensorSpec> tensors, std::uint32_t rank);

struct Layout {
  bus::Manifest manifest;
  std::vector<bus::SourceHoldings> sources;
  std::vector<bus::ReceiverBindings> receivers;
};

// `sources` ranks of row shards of `model` (cli::rowShards) into 2 TP halves (`tp2`) or 1 whole receiver.
Layout layoutOf(const std::string& model, std::uint32_t sources, bool tp2);
bus::RegionPlan planOf(const Layout& layout);

}  // namespace wsync::bench
