/* A round through the C API from C: this file is compiled as C11 with -Wall -Wextra -Werror -pedantic, so it also
 * proves that wsync.h is C. A coordinator, a worker and a trainer in this process, one version of two tensors over
 * shm; capi_test.cpp calls it. */
#include <stdio.h>
#include <string.h>

#include <wsync/wsync.h>

#include "capi_round.h"

struct engine {
  int pauses;
  int resumes;
  uint64_t applied;
};

static int32_t on_pause(void* user_data, wsync_pause_mode mode, uint64_t round, char* error, size_t error_size) {
  struct engine* engine = (struct engine*)user_data;
  (void)mode;
  (void)round;
  (void)error;
  (void)error_size;
  ++engine->pauses;
  return 0;
}

static void on_resume(void* user_data, uint64_t applied_version) {
  (void)applied_version;
  ++((struct engine*)user_data)->resumes;
}

static void on_applied(void* user_data, uint64_t version, uint64_t round) {
  (void)round;
  ((struct engine*)user_data)->applied = version;
}

static int failed(char* error, size_t error_size, const char* what, wsync_status status) {
  snprintf(error, error_size, "%s: %s: %s", what, wsync_status_name(status), wsync_last_error());
  return 1;
}

int wsync_test_c_round(const char* bus, char* error, size_t error_size) {
  uint16_t embed[8 * 4];
  float head[4];
  uint16_t embed_received[8 * 4];
  float head_received[4];
  const int64_t embed_shape[] = {8, 4};
  const int64_t head_shape[] = {4};
  wsync_tensor sent[2];
  wsync_tensor bound[2];
  wsync_coordinator_config coordinator_config;
  wsync_worker_config worker_config;
  wsync_trainer_config trainer_config;
  wsync_publish_options options;
  wsync_outcome outcome;
  wsync_coordinator* coordinator = NULL;
  wsync_worker* worker = NULL;
  wsync_trainer* trainer = NULL;
  struct engine engine = {0, 0, 0};
  wsync_status status;
  int result = 1;
  size_t i;

  for (i = 0; i < 8 * 4; ++i) embed[i] = (uint16_t)(i * 7 + 1);
  for (i = 0; i < 4; ++i) head[i] = 0.5f * (float)i;
  memset(embed_received, 0, sizeof embed_received);
  memset(head_received, 0, sizeof head_received);
  sent[0].name = "embed.weight";
  sent[0].dtype = WSYNC_DTYPE_BF16;
  sent[0].ndim = 2;
  sent[0].shape = embed_shape;
  sent[0].data = embed;
  sent[0].bytes = sizeof embed;
  sent[1].name = "head.bias";
  sent[1].dtype = WSYNC_DTYPE_F32;
  sent[1].ndim = 1;
  sent[1].shape = head_shape;
  sent[1].data = head;
  sent[1].bytes = sizeof head;
  bound[0] = sent[0];
  bound[0].data = embed_received;
  bound[1] = sent[1];
  bound[1].data = head_received;

  wsync_coordinator_config_init(&coordinator_config);
  coordinator_config.bus = bus;
  status = wsync_coordinator_start(&coordinator_config, &coordinator);
  if (status != WSYNC_OK) return failed(error, error_size, "wsync_coordinator_start", status);

  wsync_worker_config_init(&worker_config);
  worker_config.connection.bus = bus;
  worker_config.agent_id = "c-worker";
  worker_config.pause = on_pause;
  worker_config.resume = on_resume;
  worker_config.applied = on_applied;
  worker_config.user_data = &engine;
  status = wsync_worker_start(&worker_config, bound, 2, &worker);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_worker_start", status);
    goto done;
  }

  wsync_trainer_config_init(&trainer_config);
  trainer_config.connection.bus = bus;
  trainer_config.agent_id = "c-trainer";
  status = wsync_trainer_start(&trainer_config, &trainer);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_trainer_start", status);
    goto done;
  }
  status = wsync_trainer_declare_manifest(trainer, sent, 2);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_trainer_declare_manifest", status);
    goto done;
  }
  wsync_publish_options_init(&options);
  options.label = "from C";
  options.pause_mode = WSYNC_PAUSE_WAIT;
  status = wsync_trainer_publish(trainer, 1, sent, 2, &options);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_trainer_publish", status);
    goto done;
  }
  memset(&outcome, 0, sizeof outcome);
  outcome.struct_size = sizeof outcome;
  status = wsync_trainer_wait(trainer, 20000, &outcome);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_trainer_wait", status);
    goto done;
  }
  if (outcome.kind != WSYNC_OUTCOME_COMMITTED || outcome.version != 1 || outcome.bytes != sizeof embed + sizeof head) {
    snprintf(error, error_size, "outcome kind %d version %llu bytes %llu: %s", (int)outcome.kind,
             (unsigned long long)outcome.version, (unsigned long long)outcome.bytes, outcome.detail);
    goto done;
  }
  status = wsync_worker_wait_for_version(worker, 1, 20000);
  if (status != WSYNC_OK) {
    failed(error, error_size, "wsync_worker_wait_for_version", status);
    goto done;
  }
  if (memcmp(embed, embed_received, sizeof embed) != 0 || memcmp(head, head_received, sizeof head) != 0) {
    snprintf(error, error_size, "the worker's tensors differ from the trainer's");
    goto done;
  }
  if (engine.pauses != 1 || engine.applied != 1 || wsync_worker_applied_version(worker) != 1) {
    snprintf(error, error_size, "engine: %d pauses, version %llu applied", engine.pauses,
             (unsigned long long)engine.applied);
    goto done;
  }
  result = 0;

done:
  wsync_trainer_destroy(trainer);
  wsync_worker_destroy(worker);
  wsync_coordinator_destroy(coordinator);
  return result;
}
