#pragma once
// The manifest of a model the catalog knows (cli::modelTensors): "opt-125m", "tiny", "synthetic:COUNT:MIB".
#include <string>

#include <wsync/bus/protocol/manifest.hpp>

namespace wsync::bench {

// Throws BenchFailure naming the model when the catalog does not know it.
bus::Manifest catalogManifest(const std::string& model);

}  // namespace wsync::bench
