#pragma once
// Checkpoints in the safetensors format (8-byte little-endian header length, a JSON header, then the raw tensor
// bytes): how a trainer's real weights get into a manifest, and how tests and benchmarks write reproducible ones.
// The reader validates the header like any untrusted input before handing out a single byte.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/safetensors_error.hpp"

namespace wsync::cli {

using bus::TensorSpec;

// The bound of the reference implementation (huggingface/safetensors): a header this long would describe millions
// of tensors, far past kMaxTensors, so a longer one is damage or an attack, never a model.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// A safetensors file mapped read-only. Move-only; the spans from bytes() live as long as the object.
// The file must not be truncated while it is open (reading a truncated mapping raises SIGBUS); writeSafetensors
// replaces files by rename, which never does that to an open one.
class SafetensorsFile {
 public:
  // Maps the file and validates every header entry: dtype known, shape non-negative, data_offsets matching the
  // byte count, inside the data area and not overlapping another tensor. Gaps between tensors and bytes after the
  // last one are allowed (the reference reader refuses them; nothing here needs them gone).
  static tl::expected<SafetensorsFile, SafetensorsFailure> open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // In the order of their bytes in the file, ties (zero-byte tensors) in header order: a file written by
  // writeSafetensors reads back in the order it was written, so its manifest and digest do not change.
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The bytes of tensors()[index], unaligned in general (writeSafetensors starts the data area at a multiple of 8).
  std::span<const std::byte> bytes(std::size_t index) const;
  // "__metadata__", empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Range {
    std::uint64_t begin = 0;  // from the start of the file
    std::uint64_t size = 0;
  };

  SafetensorsFile(const std::byte* mapped, std::size_t mappedBytes) : mapped_(mapped), mappedBytes_(mappedBytes) {}
  void unmap();

  const std::byte* mapped_ = nullptr;
  std::size_t mappedBytes_ = 0;
  std::vector<TensorSpec> tensors_;
  std::vector<Range> ranges_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` with their bytes `data` (one span per tensor, of exactly its byte count) and `metadata`.
// Deterministic: the same arguments give a byte-identical file (metadata first, tensors and their bytes in the
// given order, no gaps, the header padded with spaces to a multiple of 8). Written to "<path>.tmp-<pid>" and
// renamed over `path`, so a reader sees the old file or the whole new one, never a part; not synced to disk, since
// the promise is to concurrent readers, not across a power loss.
tl::expected<void, SafetensorsFailure> writeSafetensors(const std::filesystem::path& path,
                                                        std::span<const TensorSpec> tensors,
                                                        std::span<const std::span<const std::byte>> data,
                                                        const std::map<std::string, std::string>& metadata = {});

}  // namespace wsync::cli
