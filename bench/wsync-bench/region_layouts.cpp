#include "region_layouts.hpp"

#include <wsync/cli/model_catalog.hpp>
#include <wsync/cli/model_layouts.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {

bus::ReceiverBindings tensorParallelHalf(std::span<const bus::TensorSpec> tensors, std::uint32_t rank) {
  bus::ReceiverBindings bindings;
  for (const bus::TensorSpec& spec : tensors) {
    bus::Box box = bus::wholeBox(spec.shape);
    if (spec.shape.size() >= 2) {
      const bool rowParallel =
          spec.name.find("o_proj") != std::string::npos || spec.name.find("down_proj") != std::string::npos;
      const std::size_t dim = rowParallel ? spec.shape.size() - 1 : 0;
      if (spec.shape[dim] >= 2) {
        const auto [begin, end] = cli::partRange(spec.shape[dim], cli::Part{rank, 2});
        box.offset[dim] = begin;
        box.extent[dim] = end - begin;
      }
    }
    const auto local = static_cast<std::uint32_t>(bindings.locals.size());
    bindings.locals.push_back({spec.name, spec.dtype, box.extent});
    bindings.regions.push_back({spec.name, box, local, std::vector<std::int64_t>(box.extent.size(), 0), box.extent});
  }
  return bindings;
}

Layout layoutOf(const std::string& model, std::uint32_t sources, bool tp2) {
  auto tensors = cli::modelTensors(model);
  if (!tensors) throw BenchFailure("model " + model + ": unknown");
  auto manifest = bus::Manifest::create(*tensors);
  if (!manifest) throw BenchFailure("model " + model + ": " + manifest.error().describe());
  Layout layout{std::move(*manifest), {}, {}};
  for (std::uint32_t s = 0; s < sources; ++s) layout.sources.push_back(cli::rowShards(*tensors, cli::Part{s, sources}));
  if (tp2) {
    for (std::uint32_t r = 0; r < 2; ++r) layout.receivers.push_back(tensorParallelHalf(*tensors, r));
  } else {
    layout.receivers.push_back(bus::wholeBindings(layout.manifest));
  }
  return layout;
}

bus::RegionPlan planOf(const Layout& layout) {
  std::vector<std::string> sourceNames;
  std::vector<std::string> receiverNames;
  for (std::size_t s = 0; s < layout.sources.size(); ++s) sourceNames.push_back("source " + std::to_string(s));
  for (std::size_t r = 0; r < layout.receivers.size(); ++r) receiverNames.push_back("receiver " + std::to_string(r));
  auto plan = bus::RegionPlan::build(layout.manifest, layout.sources, layout.receivers, sourceNames, receiverNames);
  if (!plan) throw BenchFailure("plan: " + plan.error().describe());
  return std::move(*plan);
}

}  // namespace wsync::bench
