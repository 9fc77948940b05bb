// Writes the seeds of corpus/capi (run by hand when capi_fuzz_input.hpp changes; never by the tests): a worker's
// start with valid tensors, which passes the boundary and fails only to register (no coordinator), and `refused_*`
// inputs that the boundary must refuse (WSYNC_INVALID_ARGUMENT), which this program checks before writing them.
//
//   build/tests/fuzz/wsync_make_capi_corpus tests/fuzz/corpus/capi
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "capi_fuzz_input.hpp"
#include "wsync/wsync.h"

namespace {

namespace fs = std::filesystem;
using wsync::fuzz::FuzzCase;
using wsync::fuzz::FuzzTensor;

FuzzTensor tensor(std::string name, std::uint8_t dtype, std::vector<std::int64_t> shape) {
  FuzzTensor out;
  out.name = std::move(name);
  out.dtype = dtype;
  out.ndim = static_cast<std::uint8_t>(shape.size());
  out.bytes = wsync_dtype_size(dtype);
  for (const std::int64_t dimension : shape) out.bytes *= static_cast<std::uint64_t>(dimension);
  out.shape = std::move(shape);
  return out;
}

FuzzCase validCase() {
  FuzzCase out;
  out.structSize = sizeof(wsync_worker_config);
  out.bus = "fuzz-bus";
  out.agentId = "fuzz-worker";
  out.tensors = {tensor("embed.weight", WSYNC_DTYPE_BF16, {32, 16}), tensor("head.bias", WSYNC_DTYPE_F32, {16})};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FOLDER\n", argv[0]);
    return 2;
  }
  char runtime[] = "/tmp/wsync-capi-corpus.XXXXXX";
  if (::mkdtemp(runtime) == nullptr || ::setenv("WSYNC_RUNTIME_DIR", runtime, 1) != 0) return 1;
  const fs::path folder = argv[1];
  fs::create_directories(folder);

  using Change = std::function<void(FuzzCase&)>;
  const std::vector<std::pair<std::string, Change>> refused = {
      {"refused_no_tensors", [](FuzzCase& c) { c.tensors.clear(); }},
      {"refused_name_null", [](FuzzCase& c) { c.tensors[1].flags = 1; }},
      {"refused_name_empty", [](FuzzCase& c) { c.tensors[1].name.clear(); }},
      {"refused_name_not_utf8", [](FuzzCase& c) { c.tensors[1].name = "head.\xff\xfe"; }},
      {"refused_name_control_byte", [](FuzzCase& c) { c.tensors[1].name = "head\x1b[2J"; }},
      {"refused_name_too_long", [](FuzzCase& c) { c.tensors[1].name.assign(1500, 'n'); }},
      {"refused_name_duplicate", [](FuzzCase& c) { c.tensors[1].name = c.tensors[0].name; }},
      {"refused_dtype_zero", [](FuzzCase& c) { c.tensors[1].dtype = 0; }},
      {"refused_dtype_unknown", [](FuzzCase& c) { c.tensors[1].dtype = 99; }},
      {"refused_ndim_17",
       [](FuzzCase& c) { c.tensors[1] = tensor("deep", WSYNC_DTYPE_U8, std::vector<std::int64_t>(17, 1)); }},
      {"refused_ndim_past_the_array",
       [](FuzzCase& c) {
         c.tensors[1].ndim = 200;
         c.tensors[1].shape.assign(wsync::fuzz::kMaxFuzzShape, 1);
       }},
      {"refused_shape_null", [](FuzzCase& c) { c.tensors[0].flags = 2; }},
      {"refused_shape_negative", [](FuzzCase& c) { c.tensors[0].shape[1] = -16; }},
      {"refused_shape_overflow",
       [](FuzzCase& c) {
         c.tensors[0].shape = {INT64_MAX, INT64_MAX};
       }},
      {"refused_bytes_mismatch", [](FuzzCase& c) { c.tensors[0].bytes -= 2; }},
      {"refused_data_null", [](FuzzCase& c) { c.tensors[0].flags = 4; }},
      {"refused_memory_overlap", [](FuzzCase& c) { c.tensors[1].flags = 8; }},
      {"refused_struct_size_zero", [](FuzzCase& c) { c.structSize = 0; }},
      {"refused_struct_size_inside_a_field", [](FuzzCase& c) { c.structSize = 13; }},
      {"refused_struct_size_without_callbacks", [](FuzzCase& c) { c.structSize = 64; }},
      {"refused_bus_null", [](FuzzCase& c) { c.flags = 1; }},
      {"refused_bus_name", [](FuzzCase& c) { c.bus = "../etc"; }},
      {"refused_transport", [](FuzzCase& c) { c.transport = "tcp://"; }},
      {"refused_agent_id", [](FuzzCase& c) { c.agentId = "two words"; }},
      {"refused_agent_id_null", [](FuzzCase& c) { c.flags = 2; }},
      {"refused_pause_null", [](FuzzCase& c) { c.flags = 4; }},
  };
  FuzzCase scalar = validCase();
  scalar.tensors.push_back(tensor("scale", WSYNC_DTYPE_F64, {}));
  FuzzCase empty = validCase();
  empty.tensors.push_back(tensor("empty", WSYNC_DTYPE_F8_E5M2, {0, 7}));
  empty.tensors.back().flags = 4;  // no data: nothing to point at
  std::vector<std::pair<std::string, FuzzCase>> seeds = {
      {"valid_two_tensors", validCase()}, {"valid_scalar", scalar}, {"valid_empty_tensor_without_data", empty}};
  for (const auto& [name, change] : refused) {
    FuzzCase input = validCase();
    change(input);
    seeds.emplace_back(name, std::move(input));
  }

  int failures = 0;
  for (const auto& [name, input] : seeds) {
    const wsync_status status = wsync::fuzz::CallerView(input).start();
    const wsync_status expected = name.rfind("refused_", 0) == 0 ? WSYNC_INVALID_ARGUMENT : WSYNC_UNAVAILABLE;
    if (status != expected) {
      std::fprintf(stderr, "%s: %s (%s), expected %s\n", name.c_str(), wsync_status_name(status), wsync_last_error(),
                   wsync_status_name(expected));
      ++failures;
      continue;
    }
    const std::vector<std::uint8_t> bytes = wsync::fuzz::writeFuzzCase(input);
    std::ofstream out(folder / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  fs::remove_all(runtime);
  std::printf("%zu seeds, %d not as expected\n", seeds.size() - static_cast<std::size_t>(failures), failures);
  return failures == 0 ? 0 : 1;
}
