"""Watching a bus: its live event stream and its status, as `wsync-mon --json` and `wsync-ctl status --json`
show them. Never on the data path."""

from __future__ import annotations

import ctypes
import json
import time
from collections.abc import Iterator
from typing import Any

from . import _native as N
from ._closing import Closing
from .connection import Connection
from .errors import StoppedError, TimeoutError

__all__ = ["events", "status", "EventStream"]


def status(bus: str | Connection, timeout: float = 5.0) -> dict[str, Any]:
    """The coordinator's snapshot as a dict (committed_version, agents, the round in progress, ...). Raises
    TimeoutError when no coordinator answers within `timeout` seconds (UnavailableError when the bus cannot be
    reached at all)."""
    lib = N.lib()
    connection, strings = N.connection(bus)

    def request():
        text = ctypes.c_void_p()
        code = lib.wsync_bus_status(ctypes.byref(connection), int(timeout * 1000), ctypes.byref(text))
        if code != N.OK:
            return code, None, N.last_error()
        return code, N.take_string(text), ""

    code, text, error = N.interruptible(request)
    del strings
    if code != N.OK:
        raise N.error(code, error)
    return json.loads(text)


class EventStream(Closing):
    """The bus's events as dicts, one per event (``topic``, ``seq``, ``type`` and the event's fields). An iterator
    and a context manager; ``next_event(timeout)`` waits up to `timeout` seconds (None: for ever, in slices)."""

    def __init__(self, bus: str | Connection, timeout: float | None = None):
        self.connection = Connection.of(bus)
        self.bus = self.connection.bus
        self.timeout = timeout
        lib = N.lib()
        connection, strings = N.connection(self.connection)
        handle = ctypes.c_void_p()
        N.check(lib.wsync_events_open(ctypes.byref(connection), ctypes.byref(handle)))
        del strings
        self._lib = lib
        self._handle: ctypes.c_void_p | None = handle

    def next_event(self, timeout: float | None = None) -> dict[str, Any]:
        """The next event; TimeoutError when none came within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        text = ctypes.c_void_p()
        while True:
            handle = self._handle
            if handle is None:
                raise StoppedError(f"the event stream of bus '{self.bus}' is closed")
            remaining = N.SLICE_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
            code = self._lib.wsync_events_next(handle, int(min(remaining, N.SLICE_SECONDS) * 1000), ctypes.byref(text))
            if code == N.OK:
                return json.loads(N.take_string(text))
            if code != N.TIMEOUT:
                raise N.error(code)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no event on bus '{self.bus}' within {timeout} s")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        return self.next_event(self.timeout)

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.wsync_events_close(handle)


def events(bus: str | Connection, timeout: float | None = None) -> EventStream:
    """Subscribes to every event of `bus`: ``for event in wsync.events("rl"): ...``. Each step waits up to
    `timeout` seconds for the next event (None: for ever) and raises TimeoutError when none came."""
    return EventStream(bus, timeout)
