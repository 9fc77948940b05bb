"""wsync from Python: publish policy versions from a trainer and apply them in inference workers, zero-copy.

Pure Python over libwsync.so (its C API, through ctypes): one native build serves every CPython from 3.10 up.
torch and numpy are never imported here; their tensors are taken by pointer when the caller has them.
"""

from __future__ import annotations

from .connection import Connection
from .coordinator import Coordinator
from .errors import (
    AbortedError,
    BusyError,
    Error,
    InternalError,
    InvalidArgumentError,
    ManifestMismatchError,
    PauseWithdrawn,
    RefusedError,
    StoppedError,
    TimeoutError,
    UnavailableError,
    UnsupportedError,
)
from .monitor import EventStream, events, status
from .outcome import Outcome, OutcomeKind
from .spans import SpanRecorder, check_spans
from .trainer import Progress, PublishHandle, Trainer
from .worker import Counters, PauseGate, Worker

__version__ = "0.1.0"

__all__ = [
    "Connection",
    "Coordinator",
    "Trainer",
    "PublishHandle",
    "Outcome",
    "OutcomeKind",
    "Progress",
    "Worker",
    "Counters",
    "PauseGate",
    "SpanRecorder",
    "check_spans",
    "events",
    "status",
    "EventStream",
    "library_path",
    "native_version",
    "Error",
    "TimeoutError",
    "InvalidArgumentError",
    "ManifestMismatchError",
    "UnavailableError",
    "BusyError",
    "StoppedError",
    "UnsupportedError",
    "InternalError",
    "AbortedError",
    "RefusedError",
    "PauseWithdrawn",
]


def library_path() -> str:
    """The path of the libwsync.so in use (loads it): $WSYNC_LIBRARY, else the package's own."""
    from . import _native

    return _native.library_path()


def native_version() -> str:
    """libwsync.so's version string."""
    from . import _native

    return _native.text(_native.lib().wsync_version())
