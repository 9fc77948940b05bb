// libwsync.so's boundary, through wsync.h only: NULL handles and pointers, configs out of range and malformed
// tensors are refused with WSYNC_INVALID_ARGUMENT (or the status their case has) and a text that names the field
// or the tensor; statuses, dtypes and reasons have their names.
#include "capi_fixture.hpp"

namespace wsync::capi_test {
namespace {

TEST_F(CApi, NullHandlesAndPointersAreRefusedByName) {
  wsync_outcome outcome = emptyOutcome();
  wsync_progress progress{};
  progress.struct_size = sizeof(progress);
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  char* json = nullptr;
  const std::pair<wsync_status, const char*> calls[] = {
      {wsync_coordinator_start(nullptr, nullptr), "out is NULL"},
      {wsync_trainer_start(nullptr, nullptr), "out is NULL"},
      {wsync_trainer_declare_manifest(nullptr, nullptr, 0), "trainer is NULL"},
      {wsync_trainer_publish(nullptr, 1, nullptr, 0, nullptr), "trainer is NULL"},
      {wsync_trainer_wait(nullptr, 0, &outcome), "trainer is NULL"},
      {wsync_trainer_progress(nullptr, &progress), "trainer is NULL"},
      {wsync_worker_start(nullptr, nullptr, 0, nullptr), "out is NULL"},
      {wsync_worker_wait_for_version(nullptr, 1, 0), "worker is NULL"},
      {wsync_worker_counters_get(nullptr, &counters), "worker is NULL"},
      {wsync_bus_status(nullptr, 0, &json), "connection is NULL"},
      {wsync_bus_status(nullptr, 0, nullptr), "json is NULL"},
      {wsync_events_open(nullptr, nullptr), "out is NULL"},
      {wsync_events_next(nullptr, 0, &json), "events is NULL"},
  };
  for (const auto& [status, text] : calls) {
    EXPECT_EQ(status, WSYNC_INVALID_ARGUMENT) << text;
  }
  // The last error is the last call's.
  EXPECT_STREQ(wsync_last_error(), "events is NULL");
  wsync_coordinator* coordinator = reinterpret_cast<wsync_coordinator*>(1);
  EXPECT_EQ(wsync_coordinator_start(nullptr, &coordinator), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(coordinator, nullptr);
  EXPECT_STREQ(wsync_last_error(), "config is NULL");

  EXPECT_EQ(wsync_coordinator_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_trainer_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_trainer_rank(nullptr), -1);
  EXPECT_EQ(wsync_worker_applied_version(nullptr), 0U);
  EXPECT_EQ(wsync_worker_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_worker_rank(nullptr), -1);
  wsync_coordinator_destroy(nullptr);
  wsync_trainer_destroy(nullptr);
  EXPECT_EQ(wsync_worker_destroy(nullptr), WSYNC_OK);
  wsync_events_close(nullptr);
  EXPECT_STREQ(wsync_last_error(), "config is NULL");  // destroys leave the last error alone
  wsync_string_free(nullptr);
  wsync_coordinator_config_init(nullptr);
  wsync_trainer_config_init(nullptr);
  wsync_worker_config_init(nullptr);
  wsync_publish_options_init(nullptr);
}

TEST_F(CApi, ConfigsOutOfRangeAreRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  auto tensors = engine_.bindings();
  wsync_worker* worker = nullptr;
  wsync_trainer* trainer = nullptr;

  wsync_coordinator_config coordinatorConfig;
  wsync_coordinator_config_init(&coordinatorConfig);
  coordinatorConfig.bus = bus_.c_str();
  wsync_coordinator* second = nullptr;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_UNAVAILABLE);  // the bus has one
  EXPECT_TRUE(contains(lastError(), "pid")) << lastError();
  coordinatorConfig.heartbeat_timeout_ms = -1;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "heartbeat_timeout_ms is -1")) << lastError();
  coordinatorConfig.struct_size = 0;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "struct_size is 0")) << lastError();
  coordinatorConfig.struct_size = offsetof(wsync_coordinator_config, bus) + 3;  // inside a pointer
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "ends inside a field")) << lastError();

  wsync_trainer_config trainerConfig;
  wsync_trainer_config_init(&trainerConfig);
  trainerConfig.connection.bus = bus_.c_str();
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "agent_id is required");
  trainerConfig.agent_id = "two words";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "agent_id")) << lastError();
  trainerConfig.agent_id = "trainer";
  trainerConfig.channel = 9;
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "channel is 9: not a wsync_channel");
#ifndef WSYNC_HAVE_CUDA
  trainerConfig.channel = WSYNC_CHANNEL_NCCL;
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_UNSUPPORTED);
  EXPECT_TRUE(contains(lastError(), "without CUDA")) << lastError();
#endif
  trainerConfig.channel = WSYNC_CHANNEL_SHM;
  trainerConfig.connection.bus = "no/slashes";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "bus 'no/slashes'")) << lastError();
  trainerConfig.connection.bus = bus_.c_str();
  trainerConfig.connection.curve_keys = "/nonexistent.keys";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "CURVE needs both curve_keys and server_key")) << lastError();
  EXPECT_EQ(trainer, nullptr);

  wsync_worker_config workerConfigValue = workerConfig(bus_, "worker", engine_);
  workerConfigValue.memory = 7;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "memory is 7")) << lastError();
  workerConfigValue = workerConfig(bus_, "worker", engine_);
  workerConfigValue.resume = nullptr;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "callbacks are required")) << lastError();
  const std::string nobody = wsync::test::uniqueBusName("nobody");
  workerConfigValue = workerConfig(nobody, "worker", engine_);
  workerConfigValue.registration_timeout_ms = 200;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_UNAVAILABLE);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(worker, nullptr);
}

TEST_F(CApi, MalformedTensorsAreRefusedNamingTheTensor) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  const wsync_worker_config config = workerConfig(bus_, "worker", engine_);
  auto bindings = engine_.bindings();
  auto refusedBinding = [&](std::vector<wsync_tensor> tensors) {
    wsync_worker* worker = nullptr;
    const wsync_status status = wsync_worker_start(&config, tensors.data(), tensors.size(), &worker);
    EXPECT_EQ(worker, nullptr);
    wsync_worker_destroy(worker);
    return std::pair{status, lastError()};
  };
  auto withTensor1 = [&](auto change) {
    auto tensors = bindings;
    change(tensors[1]);
    return refusedBinding(tensors);
  };
  using Answer = std::pair<wsync_status, std::string>;
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.bytes = 100; }),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "tensor 1 ('layers.0.weight'): bytes 100 but dtype F32 x shape [32, 32] is 4096"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.name = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1: name is NULL"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.dtype = 99; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): dtype 99 is not a wsync dtype (1 to 15)"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.ndim = 17; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): ndim 17 is above 16"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.shape = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): shape is NULL but ndim is 2"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.data = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): data is NULL"}));
  const std::int64_t negative[] = {32, -32};
  EXPECT_EQ(withTensor1([&](wsync_tensor& t) { t.shape = negative; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): shape [32, -32] is negative"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.name = "bad\tname"; }).first, WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "tensor 1: ")) << lastError();
  EXPECT_EQ(withTensor1([&](wsync_tensor& t) { t.name = bindings[0].name; }).first, WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "embed.weight")) << lastError();
  // Memory another tensor holds, of this worker or of a live one in this process: both tensors named.
  EXPECT_EQ(withTensor1([&](wsync_tensor& t) { t.data = static_cast<std::byte*>(bindings[0].data) + 64; }).first,
            WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(lastError().rfind("tensor 1: tensor 'layers.0.weight': memory [0x", 0), 0U) << lastError();
  EXPECT_TRUE(contains(lastError(), "overlaps that of tensor 'embed.weight' [0x")) << lastError();
  {
    const wsync_worker_config holderConfig = workerConfig(bus_, "holder", engine_);
    wsync_worker* holder = nullptr;
    ASSERT_EQ(wsync_worker_start(&holderConfig, bindings.data(), bindings.size(), &holder), WSYNC_OK) << lastError();
    EXPECT_EQ(refusedBinding(bindings).first, WSYNC_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(lastError(), "tensor 'embed.weight': memory [0x")) << lastError();
    EXPECT_TRUE(contains(lastError(), ", bound by worker 'holder' of this process")) << lastError();
    EXPECT_EQ(wsync_worker_destroy(holder), WSYNC_OK);
  }
  EXPECT_EQ(refusedBinding({}).second, "no tensors to bind: a worker binds at least one");
  wsync_worker* worker = nullptr;
  EXPECT_EQ(wsync_worker_start(&config, nullptr, 3, &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "tensors is NULL but count is 3");

  // The trainer: its manifest, then versions that differ from it.
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(trainer);
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), nullptr), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "wsync_trainer_declare_manifest first")) << lastError();
  EXPECT_EQ(wsync_trainer_declare_manifest(trainer.get(), tensors.data(), 0), WSYNC_INVALID_ARGUMENT);
  auto badManifest = tensors;
  badManifest[2].dtype = 0;
  EXPECT_EQ(wsync_trainer_declare_manifest(trainer.get(), badManifest.data(), badManifest.size()),
            WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "tensor 2 ('head.bias'): dtype 0")) << lastError();
  declare(trainer.get());

  auto mismatch = [&](auto change) {
    auto changed = tensors;
    change(changed);
    const wsync_status status = wsync_trainer_publish(trainer.get(), 1, changed.data(), changed.size(), nullptr);
    return std::pair{status, lastError()};
  };
  EXPECT_EQ(mismatch([](auto& t) { std::swap(t[1], t[2]); }),
            (Answer{WSYNC_MANIFEST_MISMATCH, "tensor 1 ('head.bias'): the manifest has 'layers.0.weight' there"}));
  EXPECT_EQ(mismatch([](auto& t) { t.pop_back(); }),
            (Answer{WSYNC_MANIFEST_MISMATCH, "3 tensors for a manifest of 4"}));
  const std::int64_t transposed[] = {16, 256};
  EXPECT_EQ(mismatch([&](auto& t) { t[0].shape = transposed; }),
            (Answer{WSYNC_MANIFEST_MISMATCH,
                    "tensor 0 ('embed.weight'): dtype BF16 x shape [16, 256], the manifest says BF16 x [256, 16]"}));
  EXPECT_EQ(mismatch([](auto& t) { t[3].bytes = 4; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 3 ('scale'): bytes 4 but dtype F64 x shape [] is 8"}));
  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.pause_mode = 3;
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "options->pause_mode is 3: not a wsync_pause_mode");
  options.pause_mode = WSYNC_PAUSE_KEEP;
  options.flags = WSYNC_PUBLISH_ALLOCATIONS_KEPT | 12;
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "options->flags has unknown bits 12");
  // The same tensors again: none given, and only after a publish was accepted.
  options.flags = WSYNC_PUBLISH_SAME_TENSORS;
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "WSYNC_PUBLISH_SAME_TENSORS takes no tensors (NULL, 0), not 4");
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, nullptr, 0, &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(),
               "WSYNC_PUBLISH_SAME_TENSORS repeats the previous publish's tensors, and none was "
               "accepted since the manifest was declared");
  options.flags = 0;
  options.label = "line\nbreak";
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "options->label")) << lastError();
  // Nothing of that was published.
  wsync_outcome outcome = emptyOutcome();
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
}

TEST(CApiNames, StatusesDtypesAndReasonsHaveTheirNames) {
  EXPECT_EQ(wsync_abi_version(), static_cast<uint32_t>(WSYNC_ABI_VERSION));
  EXPECT_STREQ(wsync_version(), "0.1.0");
  EXPECT_STREQ(wsync_status_name(WSYNC_OK), "ok");
  EXPECT_STREQ(wsync_status_name(WSYNC_MANIFEST_MISMATCH), "manifest_mismatch");
  EXPECT_STREQ(wsync_status_name(WSYNC_INTERNAL), "internal");
  EXPECT_STREQ(wsync_status_name(-1), "unknown");
  EXPECT_STREQ(wsync_status_name(9), "unknown");
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_BF16), 2U);
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_F8_E5M2), 1U);
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_U64), 8U);
  EXPECT_EQ(wsync_dtype_size(0), 0U);
  EXPECT_EQ(wsync_dtype_size(16), 0U);
  EXPECT_STREQ(wsync_dtype_name(WSYNC_DTYPE_BF16), "BF16");
  EXPECT_STREQ(wsync_dtype_name(WSYNC_DTYPE_F8_E4M3), "F8E4M3");
  EXPECT_STREQ(wsync_dtype_name(0), "unknown");
  EXPECT_STREQ(wsync_dtype_name(255), "unknown");
  EXPECT_STREQ(wsync_abort_reason_name(0), "None");
  EXPECT_STREQ(wsync_abort_reason_name(3), "DigestMismatch");
  EXPECT_STREQ(wsync_abort_reason_name(999), "unknown");
  EXPECT_STREQ(wsync_refusal_name(7), "VersionNotIncreasing");
  EXPECT_STREQ(wsync_refusal_name(60000), "unknown");
  EXPECT_EQ(wsync_log_configure(nullptr, "loud", nullptr), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "level")) << lastError();
  EXPECT_EQ(wsync_log_configure("capi-test", "warn", "text"), WSYNC_OK) << lastError();
  EXPECT_STREQ(wsync_last_error(), "");
}

// A sharded trainer's holdings and a sliced worker's regions that cannot be: each refused by name, at the call.
TEST_F(CApi, HoldingsAndSlicesThatCannotBeAreRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(trainer);
  const std::int64_t origin[] = {0, 0};
  const std::int64_t middle[] = {64, 0};
  const std::int64_t late[] = {200, 0};
  const std::int64_t half[] = {128, 16};
  using Answer = std::pair<wsync_status, std::string>;
  auto holdings = [&](std::vector<wsync_region> regions, std::uint32_t rank, std::uint32_t count) {
    const wsync_status status =
        wsync_trainer_declare_holdings(trainer.get(), regions.data(), regions.size(), rank, count);
    return Answer{status, lastError()};
  };
  EXPECT_EQ(holdings({{0, 2, origin, half}}, 0, 2).first, WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "no manifest: call wsync_trainer_declare_manifest first");
  declare(trainer.get());
  EXPECT_EQ(holdings({{0, 2, late, half}}, 0, 2),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "invalid holdings: region outside the tensor: trainer rank 0 holds region [200:328, 0:16] of "
                    "tensor 'embed.weight' [256, 16], outside the tensor"}));
  EXPECT_EQ(holdings({{0, 2, origin, half}, {0, 2, middle, half}}, 0, 2),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "invalid holdings: overlapping regions: trainer rank 0 holds regions [0:128, 0:16] and [64:192, "
                    "0:16] of tensor 'embed.weight' [256, 16], which overlap in [64:128, 0:16]"}));
  EXPECT_EQ(holdings({{0, 2, origin, half}}, 2, 2),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "invalid holdings: rank 2 of 2 ranks: a sharded trainer has 1 to 4096 ranks, numbered from 0"}));
  EXPECT_EQ(holdings({{9, 2, origin, half}}, 0, 2),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "invalid holdings: unknown tensor: trainer rank 0 holds tensor 9, and the manifest has 4"}));
  EXPECT_EQ(holdings({{0, 1, origin, half}}, 0, 2),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "invalid holdings: rank mismatch: trainer rank 0 holds a region of 1 dimensions of tensor "
                    "'embed.weight' [256, 16]"}));
  EXPECT_EQ(holdings({{0, 2, nullptr, half}}, 0, 2),
            (Answer{WSYNC_INVALID_ARGUMENT, "region 0: ndim 2 but its offset or extent is NULL"}));
  EXPECT_EQ(wsync_trainer_declare_holdings(trainer.get(), nullptr, 1, 0, 2), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "regions is NULL");
  ASSERT_EQ(holdings({{0, 2, origin, half}}, 0, 2).first, WSYNC_OK) << lastError();
  // Once it holds a region, a publish takes that region's tensor, not the manifest's.
  sent_ = model_.content(1);
  auto whole = model_.tensors(sent_);
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, whole.data(), whole.size(), nullptr), WSYNC_MANIFEST_MISMATCH);
  EXPECT_EQ(lastError(), "4 tensors for holdings of 1 regions");

  // A worker's regions, against its own bound tensors.
  auto bindings = engine_.bindings();
  auto sliced = [&](std::vector<wsync_bound_region> regions) {
    wsync_worker_config config = workerConfig(bus_, "sliced", engine_);
    config.regions = regions.data();
    config.region_count = regions.size();
    wsync_worker* worker = nullptr;
    const wsync_status status = wsync_worker_start(&config, bindings.data(), bindings.size(), &worker);
    EXPECT_EQ(worker, nullptr);
    wsync_worker_destroy(worker);
    return Answer{status, lastError()};
  };
  const std::int64_t all[] = {256, 16};
  EXPECT_EQ(sliced({{"embed.weight", 2, origin, half, 0, origin, all}}),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "region 0: region [0:128, 0:16] of tensor 'embed.weight' into tensor 'embed.weight' [256, 16]: "
                    "the region's extents [128, 16] differ from the place's [256, 16]"}));
  EXPECT_EQ(sliced({{"embed.weight", 2, origin, half, 7, origin, half}}),
            (Answer{WSYNC_INVALID_ARGUMENT, "region 0 of 'embed.weight' goes into tensor 7 of 4"}));
  EXPECT_EQ(sliced({{nullptr, 2, origin, half, 0, origin, half}}),
            (Answer{WSYNC_INVALID_ARGUMENT, "region 0: tensor is NULL"}));
  EXPECT_EQ(sliced({{"embed.weight", 2, nullptr, half, 0, origin, half}}),
            (Answer{WSYNC_INVALID_ARGUMENT, "region 0 of 'embed.weight': ndim 2 but its offset or extent is NULL"}));
  EXPECT_EQ(sliced({{"embed.weight", 2, origin, half, 0, late, half}}),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "region 0: region [0:128, 0:16] of tensor 'embed.weight' into tensor 'embed.weight' [256, 16]: "
                    "the place [200:328, 0:16] is outside it"}));
}

}  // namespace
}  // namespace wsync::capi_test
