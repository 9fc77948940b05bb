/* wsync's C API: the stable boundary that Python (the `wsync` package) and other languages bind to
 * (docs/c-api.md). One build of libwsync.so serves every caller: no C++ type crosses this header, every struct
 * starts with its own size, and enums are fixed-width integers whose values never change (they are the schema's,
 * schemas/control.fbs, which only ever appends).
 *
 * Conventions:
 *  - Every call that can fail returns a wsync_status. On anything but WSYNC_OK, wsync_last_error() gives the text
 *    of the failure on the calling thread (it names the tensor, the option or the coordinator's answer).
 *  - Handles are opaque and owned by the caller: each start or open function has its destroy or close function,
 *    which accepts NULL. A handle may be used from any thread, one call at a time, except where a function says it
 *    is safe from any thread at any time. Functions that return a value rather than a status (getters) return 0
 *    (-1 for a rank) for a NULL handle.
 *  - Structs passed in are read during the call only, except tensor memory (read or written until the outcome,
 *    or for the worker's lifetime). Strings are UTF-8, NUL-terminated; NULL means "the default".
 *  - Config structs are filled with their defaults by the matching _init function, which also sets struct_size;
 *    a caller built against an older header passes a smaller struct_size, and the fields it lacks take defaults.
 *    An _init function never writes past the struct it came with (appending fields adds a new _init function), so
 *    such a caller may call the ones it knows.
 *    Structs the library fills (outcome, progress, counters) carry the caller's struct_size too: fields past it are
 *    not written. A struct_size below 4 or ending inside a field is WSYNC_INVALID_ARGUMENT.
 *  - Blocking calls take a timeout in milliseconds (0: do not wait; negative: WSYNC_INVALID_ARGUMENT; cut to a
 *    year) and return WSYNC_TIMEOUT when it runs out; a binding that must react to Ctrl-C calls them in slices (the
 *    Python package slices by 100 ms).
 *  - Callbacks run on an agent's I/O thread, one at a time, with the user_data given in the config. The calls a
 *    function forbids from its handle's own callbacks are refused there (WSYNC_INVALID_ARGUMENT, the text naming
 *    the call and the callback), leaving the handle as it was: they never end or hang the process.
 */
#ifndef WSYNC_WSYNC_H
#define WSYNC_WSYNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define WSYNC_EXPORT __attribute__((visibility("default")))
#else
#define WSYNC_EXPORT
#endif

/* Raised when a function's meaning changes or one is removed; adding functions or appending fields does not. */
#define WSYNC_ABI_VERSION 1

/* ---------------------------------------------------------------------------------------------------------------
 * Status, errors, names
 * ------------------------------------------------------------------------------------------------------------- */

typedef int32_t wsync_status;
enum {
  WSYNC_OK = 0,
  WSYNC_TIMEOUT = 1,           /* nothing within the timeout; the call may be repeated */
  WSYNC_INVALID_ARGUMENT = 2,  /* a NULL handle or pointer, an option out of range, a malformed tensor, a call
                                  its handle's own callback may not make */
  WSYNC_UNAVAILABLE = 3,       /* no coordinator answered, registration failed, the bus is in use */
  WSYNC_MANIFEST_MISMATCH = 4, /* tensors disagree with the declared manifest or with a worker's bindings */
  WSYNC_BUSY = 5,              /* a version is still in flight: wait for its outcome first */
  WSYNC_STOPPED = 6,           /* the handle was stopped, or its agent stopped by itself */
  WSYNC_UNSUPPORTED = 7,       /* e.g. a GPU channel in a build without CUDA */
  WSYNC_INTERNAL = 8           /* a bug or an unexpected system failure (the text says which) */
};

/* The ABI version the library was built with (WSYNC_ABI_VERSION of its header). */
WSYNC_EXPORT uint32_t wsync_abi_version(void);
/* "0.1.0". */
WSYNC_EXPORT const char* wsync_version(void);
/* The text of the last failure on this thread; "" when none. Valid until the thread's next wsync call. */
WSYNC_EXPORT const char* wsync_last_error(void);
/* "ok", "timeout", ...; "unknown" for a value that is not a status. Static strings. */
WSYNC_EXPORT const char* wsync_status_name(wsync_status status);

/* Element types (safetensors' names in comments); the values are schemas/control.fbs's DType. */
typedef uint8_t wsync_dtype;
enum {
  WSYNC_DTYPE_BOOL = 1, /* BOOL */
  WSYNC_DTYPE_U8 = 2,
  WSYNC_DTYPE_I8 = 3,
  WSYNC_DTYPE_I16 = 4,
  WSYNC_DTYPE_I32 = 5,
  WSYNC_DTYPE_I64 = 6,
  WSYNC_DTYPE_F16 = 7,
  WSYNC_DTYPE_BF16 = 8,
  WSYNC_DTYPE_F32 = 9,
  WSYNC_DTYPE_F64 = 10,
  WSYNC_DTYPE_F8_E4M3 = 11,
  WSYNC_DTYPE_F8_E5M2 = 12,
  WSYNC_DTYPE_U16 = 13,
  WSYNC_DTYPE_U32 = 14,
  WSYNC_DTYPE_U64 = 15
};
/* Bytes per element; 0 for a value that is not a dtype. */
WSYNC_EXPORT uint32_t wsync_dtype_size(wsync_dtype dtype);

/* What a worker's engine does with its in-flight requests while a version is applied. */
typedef uint8_t wsync_pause_mode;
enum {
  WSYNC_PAUSE_ABORT = 0, /* in-flight requests end now */
  WSYNC_PAUSE_WAIT = 1,  /* in-flight requests drain first */
  WSYNC_PAUSE_KEEP = 2   /* in-flight requests freeze and resume under the new version */
};

/* The payload channel of a trainer's rounds. */
typedef uint8_t wsync_channel;
enum {
  WSYNC_CHANNEL_SHM = 0,      /* host shared memory: host tensors, the coordinator's host */
  WSYNC_CHANNEL_NCCL = 1,     /* NCCL broadcast: device tensors, one GPU per rank */
  WSYNC_CHANNEL_CUDA_IPC = 2, /* CUDA IPC on one host: device tensors */
  WSYNC_CHANNEL_TCP = 3       /* TCP sockets: host tensors, workers on any host */
};

/* Where a worker's bound tensors live. */
typedef uint8_t wsync_memory;
enum {
  WSYNC_MEMORY_HOST = 0,         /* received into a staging copy, applied on commit (shm, tcp) */
  WSYNC_MEMORY_DEVICE = 1,       /* received in place while paused (nccl, cuda_ipc; builds with CUDA) */
  WSYNC_MEMORY_HOST_IN_PLACE = 2 /* host memory received in place while paused (shm, tcp): no staging copy, and after
                                    a failed round the engine stays paused until a version commits; for memory the
                                    engine does not serve from (its own staging) */
};

/* Why a round ended without a commit: schemas/control.fbs's AbortReason (0: none). */
typedef uint16_t wsync_abort_reason;
/* Why the coordinator refused a request: schemas/control.fbs's ErrorCode (0: none). */
typedef uint16_t wsync_refusal;

/* Names as the schema spells them ("DigestMismatch", "BF16", "Keep", ...); "unknown" for other values. */
WSYNC_EXPORT const char* wsync_dtype_name(wsync_dtype dtype);
WSYNC_EXPORT const char* wsync_abort_reason_name(wsync_abort_reason reason);
WSYNC_EXPORT const char* wsync_refusal_name(wsync_refusal refusal);

/* A string the library allocated (wsync_bus_status, wsync_events_next): freed with this. NULL is fine. */
WSYNC_EXPORT void wsync_string_free(char* text);

/* How wsync's log lines on stderr look, for the whole process: `program` is their first field (NULL: "wsync"),
 * `level` "trace", "debug", "info", "warn", "error" or "off" (NULL: $WSYNC_LOG_LEVEL, else "info"), `format` "text"
 * or "json" (NULL: "text"). Without this call, text at $WSYNC_LOG_LEVEL. Safe from any thread. */
WSYNC_EXPORT wsync_status wsync_log_configure(const char* program, const char* level, const char* format);

/* ---------------------------------------------------------------------------------------------------------------
 * Where a bus is: shared by the agents, the event stream and the status query
 * ------------------------------------------------------------------------------------------------------------- */

/* Fixed for ABI 1: it carries no struct_size, so it never grows (new settings go to the configs that embed it). */
typedef struct wsync_connection {
  const char* bus;        /* required: the bus's name */
  const char* transport;  /* NULL or "ipc": this host; "tcp://HOST:PORT": the coordinator's tcp endpoint */
  const char* curve_keys; /* tcp with CURVE: this client's key-pair file (wsync-keygen makes one) */
  const char* server_key; /* tcp with CURVE: the coordinator's public key (Z85) or a file holding it */
} wsync_connection;

/* A tensor: its name, element type, shape and memory. Declaring a manifest reads name, dtype and shape; publishing
 * and binding read data and bytes too (bytes must be dtype size x elements; data is host memory for the shm
 * channel and Host bindings, device memory for the GPU ones). */
typedef struct wsync_tensor {
  const char* name;
  wsync_dtype dtype;
  uint32_t ndim;
  const int64_t* shape; /* ndim entries; may be NULL when ndim is 0 (a scalar) */
  void* data;
  uint64_t bytes;
} wsync_tensor;

/* ---------------------------------------------------------------------------------------------------------------
 * Coordinator in this process (the Python package can also start the wsync-coordinator program)
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct wsync_coordinator wsync_coordinator;

typedef struct wsync_coordinator_config {
  uint32_t struct_size;
  const char* bus;               /* required */
  const char* transport;         /* NULL or "ipc"; "tcp://HOST:PORT" needs curve_keys + allowed_keys, or insecure */
  int64_t heartbeat_interval_ms; /* defaults: coordinator_options.hpp */
  int64_t heartbeat_timeout_ms;
  int64_t pause_timeout_ms;
  int64_t transfer_timeout_ms;
  uint64_t bucket_bytes; /* shm rounds */
  uint32_t buffer_count;
  uint64_t gpu_bucket_bytes; /* nccl and cuda_ipc rounds */
  const char* curve_keys;    /* tcp: the coordinator's key-pair file */
  const char* allowed_keys;  /* tcp: the allowlist file of client public keys */
  int32_t insecure;          /* tcp without CURVE, on a network the operator trusts */
} wsync_coordinator_config;

WSYNC_EXPORT void wsync_coordinator_config_init(wsync_coordinator_config* config);
/* Creates the bus and starts a thread that runs it. WSYNC_UNAVAILABLE when another coordinator runs the bus. */
WSYNC_EXPORT wsync_status wsync_coordinator_start(const wsync_coordinator_config* config, wsync_coordinator** out);
/* Safe from any thread at any time. */
WSYNC_EXPORT uint64_t wsync_coordinator_committed_version(const wsync_coordinator* coordinator);
/* Aborts a round in progress, says goodbye on the event stream, removes the bus's segments and socket files. */
WSYNC_EXPORT void wsync_coordinator_destroy(wsync_coordinator* coordinator);

/* ---------------------------------------------------------------------------------------------------------------
 * Trainer agent: declare a manifest, publish versions, learn their outcomes
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct wsync_trainer wsync_trainer;

typedef struct wsync_trainer_config {
  uint32_t struct_size;
  wsync_connection connection;
  const char* agent_id;  /* required, unique on the bus */
  int32_t rank;          /* -1 (default): the coordinator assigns one */
  wsync_channel channel; /* default WSYNC_CHANNEL_SHM */
  int32_t cuda_device;   /* GPU channels: the device the tensors are on */
} wsync_trainer_config;

/* wsync_publish_options.flags */
enum {
  /* The caller vouches that no tensor at the address it had in the previous publish was freed and allocated again
   * since (an allocator that counts its frees can tell: PyTorch's num_device_free). cuda_ipc then skips checking each
   * exported allocation with the driver before the transfer (about 0.4 us each: 40 ms for 100,000 allocations).
   * Tensors whose address or size changed are exported again either way. */
  WSYNC_PUBLISH_ALLOCATIONS_KEPT = 1,
  /* The memory of this trainer's previous accepted publish, again (tensors NULL, count 0): the caller updated it in
   * place. Nothing is read or checked per tensor (checking each description against the manifest costs about 0.1 us
   * a tensor, mostly cache misses: 6-9 ms for 100,000). WSYNC_INVALID_ARGUMENT if no publish was accepted yet. */
  WSYNC_PUBLISH_SAME_TENSORS = 2
};

typedef struct wsync_publish_options {
  uint32_t struct_size;
  const char* label;           /* optional text carried with the version */
  wsync_pause_mode pause_mode; /* default WSYNC_PAUSE_KEEP */
  uint64_t flags;              /* WSYNC_PUBLISH_* (default 0); a caller built before it passes struct_size 24 */
} wsync_publish_options;

typedef uint8_t wsync_outcome_kind;
enum {
  WSYNC_OUTCOME_COMMITTED = 0, /* every worker's digest matched; workers apply it right after */
  WSYNC_OUTCOME_ABORTED = 1,   /* the round started and ended without a commit: abort_reason, detail */
  WSYNC_OUTCOME_REFUSED = 2    /* the coordinator refused to start the round: refusal, detail */
};

#define WSYNC_DETAIL_CHARS 1024

typedef struct wsync_outcome {
  uint32_t struct_size;
  wsync_outcome_kind kind;
  wsync_abort_reason abort_reason;
  wsync_refusal refusal;
  uint64_t version;
  uint64_t round;
  uint64_t bytes;
  uint64_t digest_lo; /* XXH3-128 of the payload */
  uint64_t digest_hi;
  int64_t until_plan_ns;           /* begin -> transfer plan: the round's registration and the workers' pause */
  int64_t sending_ns;              /* the payload, through the channel */
  int64_t total_ns;                /* begin -> outcome */
  char detail[WSYNC_DETAIL_CHARS]; /* NUL-terminated; cut at a character boundary when longer */
} wsync_outcome;

typedef struct wsync_progress {
  uint32_t struct_size;
  uint64_t version; /* the version being sent (0: none yet) */
  uint64_t bytes_sent;
  uint64_t bytes_total;
  int32_t sending; /* the payload is moving now */
} wsync_progress;

/* A box of a manifest tensor (docs/regions.md): elements [offset[d], offset[d] + extent[d]) in each of its ndim
 * dimensions. */
typedef struct wsync_region {
  uint32_t tensor;       /* the tensor's index in the manifest */
  uint32_t ndim;         /* the tensor's rank */
  const int64_t* offset; /* ndim entries each; may be NULL when ndim is 0 */
  const int64_t* extent;
} wsync_region;

WSYNC_EXPORT void wsync_trainer_config_init(wsync_trainer_config* config);
WSYNC_EXPORT void wsync_publish_options_init(wsync_publish_options* options);
/* Registers with the bus's coordinator, waiting for it up to 30 s. */
WSYNC_EXPORT wsync_status wsync_trainer_start(const wsync_trainer_config* config, wsync_trainer** out);
/* The ordered tensors every version consists of (data and bytes are not read). WSYNC_INVALID_ARGUMENT names the
 * first tensor that cannot be in a manifest. */
WSYNC_EXPORT wsync_status wsync_trainer_declare_manifest(wsync_trainer* trainer, const wsync_tensor* tensors,
                                                         size_t count);
/* Makes this trainer rank `source_rank` of the `source_count` ranks of a sharded trainer (docs/regions.md): each
 * version it publishes holds `regions` of the manifest (its shards), and every rank publishes every version; the
 * coordinator commits a version once every rank sent its regions and every worker took its slices. After it,
 * wsync_trainer_publish takes one tensor per region, in this order: the manifest tensor's name and dtype, the
 * region's extents as its shape, dense. WSYNC_INVALID_ARGUMENT names a region outside its tensor, two that overlap,
 * a rank out of range. Cleared by the next wsync_trainer_declare_manifest. */
WSYNC_EXPORT wsync_status wsync_trainer_declare_holdings(wsync_trainer* trainer, const wsync_region* regions,
                                                         size_t count, uint32_t source_rank, uint32_t source_count);
/* Starts publishing `version` from `tensors`, in manifest order: each must carry the manifest's name, dtype and
 * shape (WSYNC_MANIFEST_MISMATCH names the first that does not); after wsync_trainer_declare_holdings, one a held
 * region. Returns once the round is handed to the agent;
 * the memory is read until the outcome is known. `options` may be NULL. */
WSYNC_EXPORT wsync_status wsync_trainer_publish(wsync_trainer* trainer, uint64_t version, const wsync_tensor* tensors,
                                                size_t count, const wsync_publish_options* options);
/* The outcome of the version in flight, waiting up to timeout_ms (0: poll). WSYNC_TIMEOUT when not known yet;
 * WSYNC_INVALID_ARGUMENT when nothing is in flight (an outcome is handed out once: after it, nothing is). */
WSYNC_EXPORT wsync_status wsync_trainer_wait(wsync_trainer* trainer, int64_t timeout_ms, wsync_outcome* outcome);
/* Safe from any thread at any time. */
WSYNC_EXPORT wsync_status wsync_trainer_progress(const wsync_trainer* trainer, wsync_progress* progress);
WSYNC_EXPORT uint64_t wsync_trainer_committed_version(const wsync_trainer* trainer);
WSYNC_EXPORT int32_t wsync_trainer_rank(const wsync_trainer* trainer);
/* Says goodbye and stops the agent. */
WSYNC_EXPORT void wsync_trainer_destroy(wsync_trainer* trainer);

/* ---------------------------------------------------------------------------------------------------------------
 * Worker agent: bind the engine's tensors, pause and resume it, apply committed versions
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct wsync_worker wsync_worker;

/* Returns once the engine no longer reads the bound tensors (for `mode`), and 0. Non-zero refuses the pause: the
 * engine goes on generating (resume is not called for it), and a round is then aborted (AgentRefused, with the
 * text written to `error`, at most error_size bytes with the NUL; error_size is WSYNC_DETAIL_CHARS) while the
 * engine keeps serving its version. `round` is 0 for an operator's pause (wsync-ctl pause); one that fails is
 * logged, and asked again when a round needs the engine paused. */
typedef int32_t (*wsync_pause_fn)(void* user_data, wsync_pause_mode mode, uint64_t round, char* error,
                                  size_t error_size);
/* Generation may go on; the bound tensors hold `applied_version`. */
typedef void (*wsync_resume_fn)(void* user_data, uint64_t applied_version);
/* A version was just written into the bound tensors (the engine is still paused). */
typedef void (*wsync_applied_fn)(void* user_data, uint64_t version, uint64_t round);
/* Called on another thread while the pause callback of `round` runs, at most once, when the bus no longer wants that
 * pause (the round was aborted, say by the pause timeout a drain ran past; an operator's pause was lifted): the engine
 * should stop quiescing and go on generating, and the pause callback return soon, non-zero if the engine had not
 * quiesced (no resume follows, and no refusal is counted) or 0 if it had (resume follows as usual). */
typedef void (*wsync_withdraw_fn)(void* user_data, uint64_t round);

typedef struct wsync_worker_config {
  uint32_t struct_size;
  wsync_connection connection;
  const char* agent_id;            /* required, unique on the bus */
  int32_t rank;                    /* -1 (default): the coordinator assigns the lowest free one */
  wsync_memory memory;             /* default WSYNC_MEMORY_HOST */
  int32_t cuda_device;             /* Device bindings: the device they are on */
  int64_t registration_timeout_ms; /* default 30 s */
  wsync_pause_fn pause;            /* required */
  wsync_resume_fn resume;          /* required */
  wsync_applied_fn applied;        /* optional */
  void* user_data;
  wsync_withdraw_fn withdraw; /* optional; without it no message is read until the pause callback returns */
  /* Optional (docs/regions.md): slices this worker receives, e.g. its tensor-parallel part. A bound tensor that no
   * region goes into receives the checkpoint tensor of its own name whole; with none at all, every bound tensor
   * does (the default). */
  const struct wsync_bound_region* regions;
  size_t region_count;
} wsync_worker_config;

/* Region `offset`/`extent` (ndim entries each: the checkpoint tensor's rank) of checkpoint tensor `tensor` goes into
 * the bound tensor `local` (an index into wsync_worker_start's tensors) at `local_offset`/`local_extent` (that
 * tensor's ndim entries each). The region's extents, leaving out those of 1, must equal the place's. */
typedef struct wsync_bound_region {
  const char* tensor;
  uint32_t ndim;
  const int64_t* offset;
  const int64_t* extent;
  uint32_t local;
  const int64_t* local_offset;
  const int64_t* local_extent;
} wsync_bound_region;

typedef struct wsync_worker_counters {
  uint32_t struct_size;
  uint64_t rounds_applied;
  uint64_t rounds_aborted;
  uint64_t rounds_refused;
  uint64_t transfers_failed;
} wsync_worker_counters;

WSYNC_EXPORT void wsync_worker_config_init(wsync_worker_config* config);
/* Binds `tensors` (names unique; memory owned by the caller, written by the agent, for the worker's lifetime),
 * registers (up to registration_timeout_ms) and starts the agent. Each tensor needs memory of its own: one that
 * shares a byte with another of this worker, or with one a live worker of this process bound, is
 * WSYNC_INVALID_ARGUMENT, the text naming both tensors (and the other worker). Empty tensors share nothing. */
WSYNC_EXPORT wsync_status wsync_worker_start(const wsync_worker_config* config, const wsync_tensor* tensors,
                                             size_t count, wsync_worker** out);
/* The version the bound tensors hold: one atomic load, for tagging every generated token. Safe from any thread. */
WSYNC_EXPORT uint64_t wsync_worker_applied_version(const wsync_worker* worker);
/* The bus's committed version (safe from any thread). */
WSYNC_EXPORT uint64_t wsync_worker_committed_version(const wsync_worker* worker);
/* Waits until the applied version is at least `version` (and its applied callback has returned): WSYNC_OK,
 * WSYNC_TIMEOUT, or WSYNC_STOPPED (the worker is being destroyed; the destroy waits for this call to return). Safe
 * from any thread but the callbacks': from this worker's own it is WSYNC_INVALID_ARGUMENT at once (no version is
 * applied while they run); from another worker's it may wait out its timeout (a round waits for every worker). */
WSYNC_EXPORT wsync_status wsync_worker_wait_for_version(wsync_worker* worker, uint64_t version, int64_t timeout_ms);
WSYNC_EXPORT int32_t wsync_worker_rank(const wsync_worker* worker);
WSYNC_EXPORT wsync_status wsync_worker_counters_get(const wsync_worker* worker, wsync_worker_counters* counters);
/* Says goodbye, stops the agent and frees the worker; waits for a callback in progress to return. WSYNC_OK once
 * the worker is gone (NULL included), leaving the last error as it was. From one of this worker's own callbacks
 * (pause, resume, applied, withdraw), which the destroy would wait for: WSYNC_INVALID_ARGUMENT, and the worker goes
 * on untouched; destroy it from another thread. WSYNC_INTERNAL if stopping failed: the worker is not freed.
 * ABI 1 first declared this void; a caller built against that declaration ignores the status (it is a return
 * register), and is refused only where it used to end the process. */
WSYNC_EXPORT wsync_status wsync_worker_destroy(wsync_worker* worker);

/* ---------------------------------------------------------------------------------------------------------------
 * Watching a bus: its status and its live event stream, as wsync-ctl status --json and wsync-mon --json show them
 * ------------------------------------------------------------------------------------------------------------- */

/* The coordinator's snapshot as one JSON object (free with wsync_string_free). One request per call: WSYNC_TIMEOUT
 * when no coordinator answered it within timeout_ms (a bus without one never answers), WSYNC_UNAVAILABLE when the
 * coordinator refused it or this client's CURVE key. */
WSYNC_EXPORT wsync_status wsync_bus_status(const wsync_connection* connection, int64_t timeout_ms, char** json);

typedef struct wsync_events wsync_events;
/* Subscribes to every event of the bus. The subscription takes effect within milliseconds, and sees only events
 * published after it (a coordinator publishes bus/beat every heartbeat interval: the first one says it is live). */
WSYNC_EXPORT wsync_status wsync_events_open(const wsync_connection* connection, wsync_events** out);
/* The next event as one JSON object (free with wsync_string_free), waiting up to timeout_ms; WSYNC_TIMEOUT when
 * none came. Events the subscriber cannot decode are skipped. */
WSYNC_EXPORT wsync_status wsync_events_next(wsync_events* events, int64_t timeout_ms, char** json);
WSYNC_EXPORT void wsync_events_close(wsync_events* events);

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_WSYNC_H */
