#pragma once
// The manifest of a model the catalog knows (bus::modelTensors): "opt-125m", "tiny", "synthetic:COUNT:MIB", ...
#include <string>

#include <wsync/bus/manifest.hpp>
#include <wsync/bus/model_catalog.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {

// Throws BenchFailure naming the model when the catalog does not know it.
inline bus::Manifest catalogManifest(const std::string& model) {
  return orThrow(bus::Manifest::create(orThrow(bus::modelTensors(model), "model " + model)), "model " + model);
}

}  // namespace wsync::bench
