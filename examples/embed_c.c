/* The C API from C: a coordinator, a worker and a trainer in one process, and one version of one tensor.
 * Build: link libwsync.so (target wsync::c). Run: ./embed_c rl */
#include <stdio.h>

#include <wsync/wsync.h>

/* Returns once the engine no longer reads the bound tensors; non-zero, with why in `error`, when it cannot. */
static int32_t pause_engine(void* engine, wsync_pause_mode mode, uint64_t round, char* error, size_t error_size) {
  (void)engine, (void)mode, (void)round, (void)error, (void)error_size;
  return 0;
}

static void resume_engine(void* engine, uint64_t applied_version) { (void)engine, (void)applied_version; }

static int ok(wsync_status status, const char* what) {
  if (status != WSYNC_OK) fprintf(stderr, "%s: %s: %s\n", what, wsync_status_name(status), wsync_last_error());
  return status == WSYNC_OK;
}

int main(int argc, char** argv) {
  const char* bus = argc > 1 ? argv[1] : "rl";
  float weights[4] = {1, 2, 3, 4}, engine_weights[4] = {0, 0, 0, 0};
  const int64_t shape[1] = {4};
  const wsync_tensor sent = {"head.bias", WSYNC_DTYPE_F32, 1, shape, weights, sizeof weights};
  const wsync_tensor bound = {"head.bias", WSYNC_DTYPE_F32, 1, shape, engine_weights, sizeof engine_weights};
  wsync_coordinator_config coordinator_config;
  wsync_worker_config worker_config;
  wsync_trainer_config trainer_config;
  wsync_coordinator* coordinator = NULL;
  wsync_worker* worker = NULL;
  wsync_trainer* trainer = NULL;
  wsync_outcome outcome = {.struct_size = sizeof(wsync_outcome)};
  int done;

  wsync_coordinator_config_init(&coordinator_config);
  coordinator_config.bus = bus;
  wsync_worker_config_init(&worker_config);
  worker_config.connection.bus = bus;
  worker_config.agent_id = "worker-0";
  worker_config.pause = pause_engine;
  worker_config.resume = resume_engine;
  wsync_trainer_config_init(&trainer_config);
  trainer_config.connection.bus = bus;
  trainer_config.agent_id = "trainer-0";

  /* Each call returns a status; wsync_last_error() says why one failed. */
  done = ok(wsync_coordinator_start(&coordinator_config, &coordinator), "coordinator") &&
         ok(wsync_worker_start(&worker_config, &bound, 1, &worker), "worker") &&
         ok(wsync_trainer_start(&trainer_config, &trainer), "trainer") &&
         ok(wsync_trainer_declare_manifest(trainer, &sent, 1), "manifest") &&
         /* `weights` is read until the outcome is known. */
         ok(wsync_trainer_publish(trainer, 1, &sent, 1, NULL), "publish") &&
         ok(wsync_trainer_wait(trainer, 30000, &outcome), "outcome") && outcome.kind == WSYNC_OUTCOME_COMMITTED &&
         ok(wsync_worker_wait_for_version(worker, 1, 30000), "worker");
  printf("version 1: %s; the worker holds %g %g %g %g\n", done ? "committed" : outcome.detail, engine_weights[0],
         engine_weights[1], engine_weights[2], engine_weights[3]);
  wsync_trainer_destroy(trainer);
  wsync_worker_destroy(worker);
  wsync_coordinator_destroy(coordinator);
  return done ? 0 : 1;
}
