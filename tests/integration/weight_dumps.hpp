#pragma once
// Comparing what the programs dumped (`--dump FILE.safetensors`): a worker's weights at exit against the trainer's
// last committed version.
#include <cstdint>
#include <string>

#include "wsync/cli/model_layouts.hpp"

namespace wsync::test {

// The safetensors file at `actualPath` holds the tensors of `expectedPath` byte for byte, tagged as `version`. Fails
// the calling test (with the tensors that differ named) otherwise.
void expectSameWeights(const std::string& expectedPath, const std::string& actualPath, std::uint64_t version);
// The same for a worker that took part `part` of a tensor-parallel engine (wsync-worker --slice): each of its tensors
// holds exactly its columns of the trainer's (cli::columnSlices).
void expectSlicedWeights(const std::string& expectedPath, const std::string& actualPath, std::uint64_t version,
                         cli::Part part);

}  // namespace wsync::test
