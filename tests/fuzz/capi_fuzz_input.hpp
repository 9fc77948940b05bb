#pragma once
// The input of the C API's fuzz target (capi_fuzzer.cpp) and its seeds (make_capi_corpus.cpp): what a caller hands
// libwsync.so, as bytes. Read back from any bytes (a short input reads as zeros), so every input is a case.
//
//   u32 struct_size of the worker config      u8 flags: 1 bus NULL, 2 agent_id NULL, 4 pause NULL
//   string bus, string transport, string agent_id   (u16 length + bytes; a NUL inside cuts the C string there)
//   u8 tensor count (at most kMaxFuzzTensors), then per tensor:
//     u8 flags: 1 name NULL, 2 shape NULL, 4 data NULL, 8 data the previous tensor's   string name   u8 dtype   u8 ndim
//     min(ndim, kMaxFuzzShape) x i64 shape   u64 bytes
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "wsync/wsync.h"

namespace wsync::fuzz {

inline constexpr std::size_t kMaxFuzzTensors = 16;
// Each tensor's data starts in a slot of its own, this long: a tensor of more bytes reaches into the next slots (no
// byte of them is ever read or written), so overlapping memory is a case as well as the flag that aliases.
inline constexpr std::size_t kFuzzSlotBytes = 4096;
// Entries of the shape array: past the rank the boundary accepts (16), so that a larger ndim with a short array is
// a case; the array holds only min(ndim, this) entries, so a read past them is one ASan sees.
inline constexpr std::size_t kMaxFuzzShape = 20;

struct FuzzTensor {
  std::uint8_t flags = 0;  // 1 name NULL, 2 shape NULL, 4 data NULL, 8 data the previous tensor's
  std::string name;
  std::uint8_t dtype = 0;
  std::uint8_t ndim = 0;
  std::vector<std::int64_t> shape;  // min(ndim, kMaxFuzzShape) entries
  std::uint64_t bytes = 0;
};

struct FuzzCase {
  std::uint32_t structSize = 0;
  std::uint8_t flags = 0;  // 1 bus NULL, 2 agent_id NULL, 4 pause NULL
  std::string bus;
  std::string transport;
  std::string agentId;
  std::vector<FuzzTensor> tensors;
};

class FuzzReader {
 public:
  FuzzReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  template <typename Value>
  Value value() {
    Value out{};
    const std::size_t take = std::min(sizeof(Value), size_ - offset_);
    std::memcpy(&out, data_ + offset_, take);
    offset_ += take;
    return out;
  }
  std::string text() {
    const std::size_t length = std::min<std::size_t>(value<std::uint16_t>(), size_ - offset_);
    std::string out(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t offset_ = 0;
};

inline FuzzCase readFuzzCase(const std::uint8_t* data, std::size_t size) {
  FuzzReader reader(data, size);
  FuzzCase out;
  out.structSize = reader.value<std::uint32_t>();
  out.flags = reader.value<std::uint8_t>();
  out.bus = reader.text();
  out.transport = reader.text();
  out.agentId = reader.text();
  const std::size_t count = std::min<std::size_t>(reader.value<std::uint8_t>(), kMaxFuzzTensors);
  for (std::size_t index = 0; index < count; ++index) {
    FuzzTensor tensor;
    tensor.flags = reader.value<std::uint8_t>();
    tensor.name = reader.text();
    tensor.dtype = reader.value<std::uint8_t>();
    tensor.ndim = reader.value<std::uint8_t>();
    tensor.shape.resize(std::min<std::size_t>(tensor.ndim, kMaxFuzzShape));
    for (std::int64_t& dimension : tensor.shape) dimension = reader.value<std::int64_t>();
    tensor.bytes = reader.value<std::uint64_t>();
    out.tensors.push_back(std::move(tensor));
  }
  return out;
}

class FuzzWriter {
 public:
  template <typename Value>
  void value(Value value) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&value);
    out_.insert(out_.end(), bytes, bytes + sizeof(Value));
  }
  void text(const std::string& text) {
    value(static_cast<std::uint16_t>(text.size()));
    out_.insert(out_.end(), text.begin(), text.end());
  }
  const std::vector<std::uint8_t>& bytes() const { return out_; }

 private:
  std::vector<std::uint8_t> out_;
};

inline std::vector<std::uint8_t> writeFuzzCase(const FuzzCase& input) {
  FuzzWriter writer;
  writer.value(input.structSize);
  writer.value(input.flags);
  writer.text(input.bus);
  writer.text(input.transport);
  writer.text(input.agentId);
  writer.value(static_cast<std::uint8_t>(input.tensors.size()));
  for (const FuzzTensor& tensor : input.tensors) {
    writer.value(tensor.flags);
    writer.text(tensor.name);
    writer.value(tensor.dtype);
    writer.value(tensor.ndim);
    for (const std::int64_t dimension : tensor.shape) writer.value(dimension);
    writer.value(tensor.bytes);
  }
  return writer.bytes();
}

// A case as a caller hands it to wsync_worker_start: shape arrays of exactly the entries given, C strings cut at a
// NUL, data in a buffer nothing reads (no coordinator answers, so no round ever writes it), each tensor's at a slot
// of its own unless it takes the previous one's, callbacks that do nothing, and 1 ms to register. `input` must
// outlive it.
class CallerView {
 public:
  explicit CallerView(const FuzzCase& input) {
    for (const FuzzTensor& tensor : input.tensors) {
      std::byte* data = memory_ + tensors.size() * kFuzzSlotBytes;
      if ((tensor.flags & 8) != 0 && !tensors.empty()) data = static_cast<std::byte*>(tensors.back().data);
      if ((tensor.flags & 4) != 0) data = nullptr;
      tensors.push_back(wsync_tensor{(tensor.flags & 1) != 0 ? nullptr : tensor.name.c_str(), tensor.dtype, tensor.ndim,
                                     (tensor.flags & 2) != 0 || tensor.shape.empty() ? nullptr : tensor.shape.data(),
                                     data, tensor.bytes});
    }
    wsync_worker_config_init(&config);
    config.struct_size = input.structSize;
    config.connection.bus = (input.flags & 1) != 0 ? nullptr : input.bus.c_str();
    config.connection.transport = input.transport.empty() ? nullptr : input.transport.c_str();
    config.agent_id = (input.flags & 2) != 0 ? nullptr : input.agentId.c_str();
    config.pause = (input.flags & 4) != 0 ? nullptr : &noPause;
    config.resume = &noResume;
    config.registration_timeout_ms = 1;
  }

  // What wsync_worker_start answers (a worker it starts is destroyed at once).
  wsync_status start() const {
    wsync_worker* worker = nullptr;
    const wsync_status status = wsync_worker_start(&config, tensors.data(), tensors.size(), &worker);
    wsync_worker_destroy(worker);
    return status;
  }

  std::vector<wsync_tensor> tensors;
  wsync_worker_config config;

 private:
  static int32_t noPause(void*, wsync_pause_mode, uint64_t, char*, size_t) { return 0; }
  static void noResume(void*, uint64_t) {}

  alignas(64) static inline std::byte memory_[kMaxFuzzTensors * kFuzzSlotBytes];
};

}  // namespace wsync::fuzz
