"""libwsync.so through ctypes: where it is, its structs and its functions (capi/include/wsync/wsync.h).

The library is loaded on first use, not at import, so that ``import wsync`` works (and says what is missing) on a
machine without it. ctypes.CDLL releases the GIL around every call; callbacks into Python take it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

from .connection import Connection
from .errors import Error, error_for_status
from .outcome import OutcomeKind

# Blocking C calls are made in slices of this many seconds, so that Ctrl-C (KeyboardInterrupt, which Python only
# delivers between bytecodes of the main thread) is seen within a slice.
SLICE_SECONDS = 0.1
SLICE_MS = int(SLICE_SECONDS * 1000)

ABI_VERSION = 1  # WSYNC_ABI_VERSION of the header this module was written against

_PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_DIR = _PACKAGE_DIR / "_native"

# ---------------------------------------------------------------------------------------------------------------
# Constants (wsync.h)
# ---------------------------------------------------------------------------------------------------------------
OK, TIMEOUT, INVALID_ARGUMENT, UNAVAILABLE, MANIFEST_MISMATCH, BUSY, STOPPED, UNSUPPORTED, INTERNAL = range(9)

DTYPE_BOOL, DTYPE_U8, DTYPE_I8, DTYPE_I16, DTYPE_I32, DTYPE_I64 = 1, 2, 3, 4, 5, 6
DTYPE_F16, DTYPE_BF16, DTYPE_F32, DTYPE_F64, DTYPE_F8_E4M3, DTYPE_F8_E5M2 = 7, 8, 9, 10, 11, 12
DTYPE_U16, DTYPE_U32, DTYPE_U64 = 13, 14, 15
DTYPE_SIZES = {
    DTYPE_BOOL: 1,
    DTYPE_U8: 1,
    DTYPE_I8: 1,
    DTYPE_I16: 2,
    DTYPE_I32: 4,
    DTYPE_I64: 8,
    DTYPE_F16: 2,
    DTYPE_BF16: 2,
    DTYPE_F32: 4,
    DTYPE_F64: 8,
    DTYPE_F8_E4M3: 1,
    DTYPE_F8_E5M2: 1,
    DTYPE_U16: 2,
    DTYPE_U32: 4,
    DTYPE_U64: 8,
}
DTYPE_NAMES = {
    DTYPE_BOOL: "BOOL",
    DTYPE_U8: "U8",
    DTYPE_I8: "I8",
    DTYPE_I16: "I16",
    DTYPE_I32: "I32",
    DTYPE_I64: "I64",
    DTYPE_F16: "F16",
    DTYPE_BF16: "BF16",
    DTYPE_F32: "F32",
    DTYPE_F64: "F64",
    DTYPE_F8_E4M3: "F8_E4M3",
    DTYPE_F8_E5M2: "F8_E5M2",
    DTYPE_U16: "U16",
    DTYPE_U32: "U32",
    DTYPE_U64: "U64",
}

PAUSE_MODES = {"abort": 0, "wait": 1, "keep": 2}
PAUSE_MODE_NAMES = {value: name for name, value in PAUSE_MODES.items()}
CHANNELS = {"shm": 0, "nccl": 1, "cuda_ipc": 2, "tcp": 3}
HOST_CHANNELS = ("shm", "tcp")  # the channels of host tensors; the others move GPU tensors
# wsync.h's wsync_memory; "host_in_place": host tensors received in place while paused (no staging copy).
MEMORY_KINDS = {"host": 0, "device": 1, "host_in_place": 2}
OUTCOME_KINDS = {0: OutcomeKind.COMMITTED, 1: OutcomeKind.ABORTED, 2: OutcomeKind.REFUSED}
DETAIL_CHARS = 1024


# ---------------------------------------------------------------------------------------------------------------
# Structs
# ---------------------------------------------------------------------------------------------------------------
class ConnectionStruct(Structure):
    _fields_ = [("bus", c_char_p), ("transport", c_char_p), ("curve_keys", c_char_p), ("server_key", c_char_p)]


class Tensor(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_uint8),
        ("ndim", c_uint32),
        ("shape", POINTER(c_int64)),
        ("data", c_void_p),
        ("bytes", c_uint64),
    ]


class CoordinatorConfig(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("bus", c_char_p),
        ("transport", c_char_p),
        ("heartbeat_interval_ms", c_int64),
        ("heartbeat_timeout_ms", c_int64),
        ("pause_timeout_ms", c_int64),
        ("transfer_timeout_ms", c_int64),
        ("bucket_bytes", c_uint64),
        ("buffer_count", c_uint32),
        ("gpu_bucket_bytes", c_uint64),
        ("curve_keys", c_char_p),
        ("allowed_keys", c_char_p),
        ("insecure", c_int32),
    ]


class TrainerConfig(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("connection", ConnectionStruct),
        ("agent_id", c_char_p),
        ("rank", c_int32),
        ("channel", c_uint8),
        ("cuda_device", c_int32),
    ]


class PublishOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("label", c_char_p), ("pause_mode", c_uint8), ("flags", c_uint64)]


PUBLISH_ALLOCATIONS_KEPT = 1  # WSYNC_PUBLISH_ALLOCATIONS_KEPT
PUBLISH_SAME_TENSORS = 2  # WSYNC_PUBLISH_SAME_TENSORS


class OutcomeStruct(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("kind", c_uint8),
        ("abort_reason", c_uint16),
        ("refusal", c_uint16),
        ("version", c_uint64),
        ("round", c_uint64),
        ("bytes", c_uint64),
        ("digest_lo", c_uint64),
        ("digest_hi", c_uint64),
        ("until_plan_ns", c_int64),
        ("sending_ns", c_int64),
        ("total_ns", c_int64),
        ("detail", c_char * DETAIL_CHARS),
    ]


class ProgressStruct(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint64),
        ("bytes_sent", c_uint64),
        ("bytes_total", c_uint64),
        ("sending", c_int32),
    ]


# int32_t (*)(void* user_data, wsync_pause_mode mode, uint64_t round, char* error, size_t error_size)
PAUSE_FN = CFUNCTYPE(c_int32, c_void_p, c_uint8, c_uint64, c_void_p, c_size_t)
# void (*)(void* user_data, uint64_t applied_version)
RESUME_FN = CFUNCTYPE(None, c_void_p, c_uint64)
# void (*)(void* user_data, uint64_t version, uint64_t round)
APPLIED_FN = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)
# void (*)(void* user_data, uint64_t round)
WITHDRAW_FN = CFUNCTYPE(None, c_void_p, c_uint64)


class RegionStruct(Structure):
    """wsync_region: a box of manifest tensor `tensor`."""

    _fields_ = [
        ("tensor", c_uint32),
        ("ndim", c_uint32),
        ("offset", POINTER(c_int64)),
        ("extent", POINTER(c_int64)),
    ]


class BoundRegionStruct(Structure):
    """wsync_bound_region: region offset/extent of checkpoint tensor `tensor` into bound tensor `local`."""

    _fields_ = [
        ("tensor", c_char_p),
        ("ndim", c_uint32),
        ("offset", POINTER(c_int64)),
        ("extent", POINTER(c_int64)),
        ("local", c_uint32),
        ("local_offset", POINTER(c_int64)),
        ("local_extent", POINTER(c_int64)),
    ]


class WorkerConfig(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("connection", ConnectionStruct),
        ("agent_id", c_char_p),
        ("rank", c_int32),
        ("memory", c_uint8),
        ("cuda_device", c_int32),
        ("registration_timeout_ms", c_int64),
        ("pause", PAUSE_FN),
        ("resume", RESUME_FN),
        ("applied", APPLIED_FN),
        ("user_data", c_void_p),
        ("withdraw", WITHDRAW_FN),
        ("regions", POINTER(BoundRegionStruct)),
        ("region_count", c_size_t),
    ]


class WorkerCountersStruct(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("rounds_applied", c_uint64),
        ("rounds_aborted", c_uint64),
        ("rounds_refused", c_uint64),
        ("transfers_failed", c_uint64),
    ]


# Opaque handles are plain c_void_p.
_S = c_int32  # wsync_status

# name: (restype, argtypes)
_FUNCTIONS = {
    "wsync_abi_version": (c_uint32, []),
    "wsync_version": (c_char_p, []),
    "wsync_last_error": (c_char_p, []),
    "wsync_status_name": (c_char_p, [_S]),
    "wsync_dtype_size": (c_uint32, [c_uint8]),
    "wsync_dtype_name": (c_char_p, [c_uint8]),
    "wsync_abort_reason_name": (c_char_p, [c_uint16]),
    "wsync_refusal_name": (c_char_p, [c_uint16]),
    "wsync_string_free": (None, [c_void_p]),
    "wsync_coordinator_config_init": (None, [POINTER(CoordinatorConfig)]),
    "wsync_coordinator_start": (_S, [POINTER(CoordinatorConfig), POINTER(c_void_p)]),
    "wsync_coordinator_committed_version": (c_uint64, [c_void_p]),
    "wsync_coordinator_destroy": (None, [c_void_p]),
    "wsync_trainer_config_init": (None, [POINTER(TrainerConfig)]),
    "wsync_publish_options_init": (None, [POINTER(PublishOptions)]),
    "wsync_trainer_start": (_S, [POINTER(TrainerConfig), POINTER(c_void_p)]),
    "wsync_trainer_declare_manifest": (_S, [c_void_p, POINTER(Tensor), c_size_t]),
    "wsync_trainer_declare_holdings": (_S, [c_void_p, POINTER(RegionStruct), c_size_t, c_uint32, c_uint32]),
    "wsync_trainer_publish": (_S, [c_void_p, c_uint64, POINTER(Tensor), c_size_t, POINTER(PublishOptions)]),
    "wsync_trainer_wait": (_S, [c_void_p, c_int64, POINTER(OutcomeStruct)]),
    "wsync_trainer_progress": (_S, [c_void_p, POINTER(ProgressStruct)]),
    "wsync_trainer_committed_version": (c_uint64, [c_void_p]),
    "wsync_trainer_rank": (c_int32, [c_void_p]),
    "wsync_trainer_destroy": (None, [c_void_p]),
    "wsync_worker_config_init": (None, [POINTER(WorkerConfig)]),
    "wsync_worker_start": (_S, [POINTER(WorkerConfig), POINTER(Tensor), c_size_t, POINTER(c_void_p)]),
    "wsync_worker_applied_version": (c_uint64, [c_void_p]),
    "wsync_worker_committed_version": (c_uint64, [c_void_p]),
    "wsync_worker_wait_for_version": (_S, [c_void_p, c_uint64, c_int64]),
    "wsync_worker_rank": (c_int32, [c_void_p]),
    "wsync_worker_counters_get": (_S, [c_void_p, POINTER(WorkerCountersStruct)]),
    "wsync_worker_destroy": (_S, [c_void_p]),  # refused from the worker's own callbacks (void before: ABI 1 alike)
    "wsync_bus_status": (_S, [POINTER(ConnectionStruct), c_int64, POINTER(c_void_p)]),
    "wsync_events_open": (_S, [POINTER(ConnectionStruct), POINTER(c_void_p)]),
    "wsync_events_next": (_S, [c_void_p, c_int64, POINTER(c_void_p)]),
    "wsync_events_close": (None, [c_void_p]),
}


# ---------------------------------------------------------------------------------------------------------------
# Finding and loading
# ---------------------------------------------------------------------------------------------------------------
def library_candidates() -> list[Path]:
    """Where libwsync.so is looked for, in order: $WSYNC_LIBRARY, then the package's own _native/lib."""
    candidates = []
    from_env = os.environ.get("WSYNC_LIBRARY")
    if from_env:
        candidates.append(Path(from_env))
    candidates.append(NATIVE_DIR / "lib" / "libwsync.so")
    candidates.append(NATIVE_DIR / "lib" / f"libwsync.so.{ABI_VERSION}")  # its SONAME, where no link was kept
    return candidates


def find_program(name: str) -> str:
    """A shipped program (wsync-coordinator, ...): $WSYNC_BIN_DIR, else the package's _native/bin, else PATH."""
    looked = []
    from_env = os.environ.get("WSYNC_BIN_DIR")
    for folder in ([Path(from_env)] if from_env else []) + [NATIVE_DIR / "bin"]:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        looked.append(str(candidate))
    on_path = shutil.which(name)
    if on_path:
        return on_path
    looked.append(f"{name} on PATH")
    raise Error(
        f"cannot find the program {name}; looked at: "
        + ", ".join(looked)
        + " (set WSYNC_BIN_DIR to the folder that holds it)",
        "unavailable",
    )


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded library with its prototypes declared; raises wsync.Error naming every place looked at."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        failures = []
        loaded = None
        candidates = library_candidates()
        if os.environ.get("WSYNC_LIBRARY"):
            candidates = candidates[:1]  # what the environment names, or nothing: never another one silently
        for candidate in candidates:
            origin = "WSYNC_LIBRARY: " if os.environ.get("WSYNC_LIBRARY") else ""
            if not candidate.exists():
                failures.append(f"{candidate} ({origin}no such file)")
                continue
            try:
                loaded = ctypes.CDLL(str(candidate))
                break
            except OSError as error:
                failures.append(f"{candidate} ({error})")
        if loaded is None:
            raise Error(
                "cannot load libwsync.so; looked at: "
                + "; ".join(failures)
                + " (set WSYNC_LIBRARY to its path, or install the wsync wheel)",
                "unavailable",
            )
        missing = []
        for name, (restype, argtypes) in _FUNCTIONS.items():
            try:
                function = getattr(loaded, name)
            except AttributeError:
                missing.append(name)
                continue
            function.restype = restype
            function.argtypes = argtypes
        if missing:
            raise Error(
                f"{loaded._name} lacks {', '.join(missing)}: not the libwsync.so this package was written for",
                "unavailable",
            )
        abi = loaded.wsync_abi_version()
        if abi != ABI_VERSION:
            raise Error(f"{loaded._name} has ABI version {abi}; this package needs {ABI_VERSION}", "unavailable")
        _lib = loaded
        return loaded


def library_path() -> str:
    """The path of the loaded libwsync.so."""
    return lib()._name


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------
def encode(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text) if isinstance(text, os.PathLike) else str(text).encode()


def text(raw: bytes | None, default: str = "") -> str:
    """A C string as the library returns it (c_char_p, a char array's bytes) as str; `default` for NULL or empty.
    Never raises: wsync's texts quote what peers sent, which need not be UTF-8."""
    return raw.decode(errors="replace") if raw else default


def last_error() -> str:
    return text(lib().wsync_last_error())


def status_name(status: int) -> str:
    return text(lib().wsync_status_name(status), f"status {status}")


def error(status: int, detail: str | None = None) -> Error:
    """The exception for `status`, with the calling thread's last error text unless `detail` is given."""
    return error_for_status(status, last_error() if detail is None else detail, status_name(status))


def check(status: int) -> None:
    if status != OK:
        raise error(status)


def take_string(pointer: c_void_p) -> str:
    """A string the library allocated, copied and freed."""
    if not pointer.value:
        return ""
    try:
        return text(ctypes.string_at(pointer.value))
    finally:
        lib().wsync_string_free(pointer)


def connection(target: str | Connection) -> tuple[ConnectionStruct, list]:
    """A wsync_connection for a bus name or a Connection, and the bytes objects it points into (keep both alive for
    the call)."""
    target = Connection.of(target)
    strings = [encode(target.bus), encode(target.transport), encode(target.curve_keys), encode(target.server_key)]
    return ConnectionStruct(*strings), strings


def interruptible(function: Callable[[], tuple[int, object, str]], on_abandoned=None):
    """Runs a blocking C call that cannot be sliced (registration, a status request) on a helper thread, and waits
    for it in slices so that Ctrl-C reaches the caller. `function` returns (status, value, last error text) from
    its own thread (the error text is per thread). When the caller is interrupted, the call finishes on its own and
    `on_abandoned(value)` disposes of what it made."""
    result: list = []
    state = {"abandoned": False, "finished": False}
    guard = threading.Lock()

    def run():
        try:
            outcome = function()
        except BaseException as failure:  # noqa: BLE001 - handed to the waiting thread
            outcome = failure
        with guard:
            result.append(outcome)
            state["finished"] = True
            dispose = state["abandoned"]
        if dispose:
            _dispose(outcome, on_abandoned)

    thread = threading.Thread(target=run, name="wsync-call", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(SLICE_SECONDS)
    except BaseException:
        with guard:
            state["abandoned"] = True
            dispose = state["finished"]
        if dispose:
            _dispose(result[0], on_abandoned)
        raise
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _dispose(outcome, on_abandoned) -> None:
    if on_abandoned is not None and not isinstance(outcome, BaseException) and outcome[0] == OK:
        on_abandoned(outcome[1])
