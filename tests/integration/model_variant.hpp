#pragma once
// A catalog model with one deliberate difference, written as a checkpoint a worker can be started with
// (`--model file:PATH`): how the tests load a worker with the wrong weights' shapes.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::test {

// Writes catalog model `model` with `change` applied to its spec list to `path`; returns the worker's `--model`.
template <typename Change>
std::string writeModelVariant(const std::string& path, const std::string& model, Change change) {
  auto specs = cli::modelTensors(model);
  EXPECT_TRUE(specs) << model;
  change(*specs);
  auto manifest = bus::Manifest::create(*specs);
  EXPECT_TRUE(manifest) << manifest.error().describe();
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::span<const std::byte>> views;
  buffers.reserve(specs->size());
  for (std::size_t index = 0; index < specs->size(); ++index) buffers.emplace_back(manifest->tensorBytes(index));
  for (const auto& buffer : buffers) views.emplace_back(buffer);
  auto written = cli::writeSafetensors(path, *specs, views);
  EXPECT_TRUE(written) << written.error().describe();
  return "file:" + path;
}

}  // namespace wsync::test
