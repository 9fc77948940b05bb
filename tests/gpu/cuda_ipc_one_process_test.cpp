// A trainer and a worker in one process over cuda_ipc, as verl's hybrid engine runs a rollout engine in the
// trainer's process: CUDA opens no IPC handle in the process that made it ("invalid device context"), so the
// worker's copy reads the trainer's own addresses. Through the C API, as a Python or C++ program embedding both
// would: the coordinator, a worker bound to device tensors and a trainer publishing device tensors (some packed in
// one allocation at odd offsets, some each a cudaMalloc of its own), several versions, each in the worker's tensors
// byte for byte; then the trainer's tensors move to new allocations and the next version still arrives. The worker's
// tensors on the trainer's GPU, and on another, read through peer access.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <wsync/wsync.h>

#include "gpu_peers.hpp"
#include "test_environment.hpp"

namespace wsync::test {
namespace {

constexpr std::int64_t kOutcomeWaitMs = 60'000;
constexpr std::uint64_t kVersions = 3;

int32_t pauseEngine(void*, wsync_pause_mode, uint64_t, char*, size_t) { return 0; }
void resumeEngine(void*, uint64_t) {}

// Device memory freed with the test.
struct DeviceBlock {
  explicit DeviceBlock(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&address, bytes), cudaSuccess); }
  ~DeviceBlock() { cudaFree(address); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  void* address = nullptr;
};

struct Model {
  std::vector<std::string> names;
  std::vector<std::size_t> bytes;
  std::vector<std::vector<std::int64_t>> shapes;

  // `addresses[i]` holds tensor i.
  std::vector<wsync_tensor> tensors(const std::vector<std::byte*>& addresses) const {
    std::vector<wsync_tensor> out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      out.push_back(wsync_tensor{names[i].c_str(), WSYNC_DTYPE_U8, 1, shapes[i].data(), addresses[i], bytes[i]});
    }
    return out;
  }
  // Version `version`'s bytes of tensor i: no two tensors, versions or positions alike.
  std::vector<std::byte> content(std::size_t tensor, std::uint64_t version) const {
    std::vector<std::byte> out(bytes[tensor]);
    for (std::size_t at = 0; at < out.size(); ++at) {
      out[at] = static_cast<std::byte>((at * 31 + tensor * 7 + version * 101) & 0xFF);
    }
    return out;
  }
};

Model makeModel() {
  Model model;
  const std::vector<std::size_t> sizes{1, 4096, 12'345, 65'536, 3, 1 << 20, 777, 40'000};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    model.names.push_back("layers." + std::to_string(i) + ".weight");
    model.bytes.push_back(sizes[i]);
    model.shapes.push_back({static_cast<std::int64_t>(sizes[i])});
  }
  return model;
}

// The first half of the tensors packed in `packed` at odd offsets, the rest each in a block of its own.
std::vector<std::byte*> place(const Model& model, DeviceBlock& packed, std::vector<std::unique_ptr<DeviceBlock>>& own) {
  std::vector<std::byte*> addresses;
  std::size_t offset = 1;
  for (std::size_t i = 0; i < model.names.size(); ++i) {
    if (i < model.names.size() / 2) {
      addresses.push_back(static_cast<std::byte*>(packed.address) + offset);
      offset += model.bytes[i] + 3;
    } else {
      own.push_back(std::make_unique<DeviceBlock>(model.bytes[i]));
      addresses.push_back(static_cast<std::byte*>(own.back()->address));
    }
  }
  return addresses;
}

std::size_t packedBytes(const Model& model) {
  std::size_t total = 1;
  for (std::size_t i = 0; i < model.names.size() / 2; ++i) total += model.bytes[i] + 3;
  return total;
}

void write(const Model& model, const std::vector<std::byte*>& addresses, std::uint64_t version) {
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const auto bytes = model.content(i, version);
    ASSERT_EQ(cudaMemcpy(addresses[i], bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
}

void expectHolds(const Model& model, const std::vector<std::byte*>& addresses, std::uint64_t version) {
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    std::vector<std::byte> held(model.bytes[i]);
    ASSERT_EQ(cudaMemcpy(held.data(), addresses[i], held.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(held == model.content(i, version)) << model.names[i] << " does not hold version " << version;
  }
}

// The worker's GPU: the trainer's (0), or another (1), which the worker reads through peer access.
class CudaIpcOneProcess : public testing::TestWithParam<int> {};

TEST_P(CudaIpcOneProcess, ATrainerAndAWorkerInOneProcessTakeEveryVersionByteForByte) {
  const int workerDevice = GetParam();
  if (auto missing = missingGpus(workerDevice + 1)) GTEST_SKIP() << *missing;
  const std::string bus = uniqueBusName("ipc-one");
  const Model model = makeModel();

  wsync_coordinator_config coordinatorConfig;
  wsync_coordinator_config_init(&coordinatorConfig);
  coordinatorConfig.bus = bus.c_str();
  coordinatorConfig.gpu_bucket_bytes = 64 << 10;  // several buckets
  wsync_coordinator* coordinator = nullptr;
  ASSERT_EQ(wsync_coordinator_start(&coordinatorConfig, &coordinator), WSYNC_OK) << wsync_last_error();

  ASSERT_EQ(cudaSetDevice(workerDevice), cudaSuccess);
  DeviceBlock engine(packedBytes(model));
  std::vector<std::unique_ptr<DeviceBlock>> engineOwn;
  const std::vector<std::byte*> bound = place(model, engine, engineOwn);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const auto boundTensors = model.tensors(bound);
  wsync_worker_config workerConfig;
  wsync_worker_config_init(&workerConfig);
  workerConfig.connection.bus = bus.c_str();
  workerConfig.agent_id = "engine";
  workerConfig.memory = WSYNC_MEMORY_DEVICE;
  workerConfig.cuda_device = workerDevice;
  workerConfig.pause = &pauseEngine;
  workerConfig.resume = &resumeEngine;
  wsync_worker* worker = nullptr;
  ASSERT_EQ(wsync_worker_start(&workerConfig, boundTensors.data(), boundTensors.size(), &worker), WSYNC_OK)
      << wsync_last_error();

  wsync_trainer_config trainerConfig;
  wsync_trainer_config_init(&trainerConfig);
  trainerConfig.connection.bus = bus.c_str();
  trainerConfig.agent_id = "trainer";
  trainerConfig.channel = WSYNC_CHANNEL_CUDA_IPC;
  trainerConfig.cuda_device = 0;
  wsync_trainer* trainer = nullptr;
  ASSERT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_OK) << wsync_last_error();

  auto publish = [&](const std::vector<std::byte*>& sent, std::uint64_t version) {
    write(model, sent, version);
    const auto tensors = model.tensors(sent);
    ASSERT_EQ(wsync_trainer_publish(trainer, version, tensors.data(), tensors.size(), nullptr), WSYNC_OK)
        << wsync_last_error();
    wsync_outcome outcome{};
    outcome.struct_size = sizeof(outcome);
    ASSERT_EQ(wsync_trainer_wait(trainer, kOutcomeWaitMs, &outcome), WSYNC_OK) << wsync_last_error();
    ASSERT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << "version " << version << ": " << outcome.detail;
    ASSERT_EQ(wsync_worker_wait_for_version(worker, version, kOutcomeWaitMs), WSYNC_OK) << wsync_last_error();
    expectHolds(model, bound, version);
  };

  DeviceBlock trainerPacked(packedBytes(model));
  std::vector<std::unique_ptr<DeviceBlock>> trainerOwn;
  const std::vector<std::byte*> sent = place(model, trainerPacked, trainerOwn);
  ASSERT_EQ(wsync_trainer_declare_manifest(trainer, model.tensors(sent).data(), model.names.size()), WSYNC_OK)
      << wsync_last_error();
  for (std::uint64_t version = 1; version <= kVersions; ++version) publish(sent, version);

  // New allocations: the export is renewed, and the worker reads the new addresses.
  DeviceBlock movedPacked(packedBytes(model));
  std::vector<std::unique_ptr<DeviceBlock>> movedOwn;
  publish(place(model, movedPacked, movedOwn), kVersions + 1);

  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  ASSERT_EQ(wsync_worker_counters_get(worker, &counters), WSYNC_OK);
  EXPECT_EQ(counters.rounds_applied, kVersions + 1);
  EXPECT_EQ(counters.transfers_failed, 0U);
  wsync_trainer_destroy(trainer);
  wsync_worker_destroy(worker);
  wsync_coordinator_destroy(coordinator);
}

INSTANTIATE_TEST_SUITE_P(WorkerGpu, CudaIpcOneProcess, testing::Values(0, 1),
                         [](const testing::TestParamInfo<int>& param) {
                           return param.param == 0 ? std::string("TheTrainers") : std::string("Another");
                         });

}  // namespace
}  // namespace wsync::test
