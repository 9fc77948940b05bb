#include "catalog_manifest.hpp"

#include <wsync/cli/model_catalog.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {

bus::Manifest catalogManifest(const std::string& model) {
  auto specs = cli::modelTensors(model);
  if (!specs) throw BenchFailure("model " + model + ": " + specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) throw BenchFailure("model " + model + ": " + manifest.error().describe());
  return std::move(*manifest);
}

}  // namespace wsync::bench
