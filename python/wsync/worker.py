"""The worker agent: binds an engine's tensors in place, pauses and resumes the engine around each version, and
tells which version the tensors hold; plus PauseGate, the bridge to an engine's step loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _native as N
from . import _regions
from ._closing import Closing
from ._tensors import HOST, TensorArray, describe, device_text, named_items
from .connection import Connection
from .errors import InvalidArgumentError, PauseWithdrawn, StoppedError, TimeoutError

__all__ = ["Worker", "Counters", "PauseGate"]


@dataclass(frozen=True)
class Counters:
    rounds_applied: int
    rounds_aborted: int
    rounds_refused: int
    transfers_failed: int


async def _awaited(awaitable):
    return await awaitable


def _write_error(buffer: int, size: int, text: str) -> None:
    """`text` into the C side's error buffer: at most size - 1 bytes, cut at a character boundary, then NUL."""
    if not buffer or size == 0:
        return
    data = text.encode("utf-8", errors="replace")[: size - 1]
    data = data.decode("utf-8", errors="ignore").encode("utf-8")
    ctypes.memmove(buffer, data + b"\0", len(data) + 1)


class Worker(Closing):
    """One inference engine's agent on bus `bus` (a name, or a Connection for a bus on another host).

    tensors: the engine's tensors, bound in place (model.named_parameters(), a state_dict, a mapping or pairs);
    the agent writes each committed version into them while the engine is paused, so they must stay where they
    are for the worker's lifetime (this object keeps them alive). Each needs memory of its own: views that share a
    byte, or memory another live Worker of this process bound, are refused (InvalidArgumentError naming both).
    on_pause(mode, round): returns once the engine no longer reads the tensors ("abort", "wait" or "keep"; round 0
    for an operator's pause). If it raises, the round is aborted (AgentRefused, with the exception's text) and the
    engine goes on serving its version. on_resume(version): generation may go on. on_applied(version, round): a
    version was just written (the engine is still paused). With loop= (an asyncio loop), any of them may be a
    coroutine function: it runs on that loop and the agent waits for it.
    memory: "host" (shm, tcp: a round lands in the agent's staging copy and is copied into the tensors on commit, so
    a failed round leaves them untouched), "device" (nccl, cuda_ipc: received in place while paused) or
    "host_in_place" (shm, tcp, received in place while paused, no staging copy); in place, a failed round leaves the
    tensors holding no committed version, so the engine stays paused until a version commits into them. Default:
    "device" when every tensor is on a GPU, else "host".
    on_withdraw(round), optional: called on another thread while on_pause still runs, at most once, when the bus no
    longer wants that pause (the round was aborted, say by the pause timeout a long drain in "wait" mode ran past; an
    operator's pause was lifted). The engine should stop quiescing and go on generating, and on_pause return soon:
    raising PauseWithdrawn if the engine had not quiesced (no on_resume follows, no refusal is counted), or
    normally if it had. PauseGate.withdraw does both. Without it, the agent reads nothing from the coordinator until
    on_pause returns. Callbacks run on the agent's I/O thread, one at a time (on_withdraw excepted); none may close
    the worker or wait for a version (both wait for the callback): that raises InvalidArgumentError and the worker
    goes on.
    slices, optional (docs/regions.md): what a worker of a tensor-parallel or expert-parallel engine receives, as
    (checkpoint tensor, region, bound tensor[, place]) tuples: region a tuple of slices (or (start, stop) pairs) of
    the checkpoint tensor, each with both bounds; place the same of the bound tensor (default: all of it). E.g. TP
    rank 1 of 2 binding its half of a column-parallel weight: ("w", (slice(512, 1024), slice(0, 768)), "w"). A bound
    tensor that no slice goes into receives the checkpoint tensor of its own name whole; the coordinator refuses a
    round whose manifest these do not fit, naming the tensor, before the engine pauses."""

    def __init__(
        self,
        bus: str | Connection,
        agent_id: str = "worker-0",
        tensors: Any = None,
        on_pause: Callable | None = None,
        on_resume: Callable | None = None,
        on_applied: Callable | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        on_withdraw: Callable | None = None,
        memory: str | None = None,
        cuda_device: int | None = None,
        rank: int = -1,
        registration_timeout: float = 30.0,
        slices: Any = None,
    ):
        lib = N.lib()
        self.connection = Connection.of(bus)
        self.bus = self.connection.bus
        self.agent_id = agent_id
        self._handle: ctypes.c_void_p | None = None
        self._closing = False
        self._callback_thread: int | None = None
        self._on_pause, self._on_resume, self._on_applied = on_pause, on_resume, on_applied
        self._on_withdraw = on_withdraw
        self._loop = loop
        self.last_pause_error: BaseException | None = None  # what the last failed on_pause raised
        self.callback_errors = 0  # exceptions raised by on_resume / on_applied (logged nowhere else)

        infos = [describe(name, tensor, writable=True) for name, tensor in named_items(tensors, "Worker tensors")]
        names = set()
        for info in infos:
            if info.name in names:
                raise InvalidArgumentError(f"tensor '{info.name}' is bound twice")
            names.add(info.name)
        devices = sorted({info.device for info in infos})
        if memory is None:
            memory = "device" if devices and all(device[0] == "cuda" for device in devices) else "host"
        if memory not in N.MEMORY_KINDS:
            raise InvalidArgumentError(f"memory '{memory}': use one of {sorted(N.MEMORY_KINDS)}")
        if memory == "device" and cuda_device is None:
            cuda_device = devices[0][1] if devices and devices[0][0] == "cuda" else 0
        wanted = ("cuda", cuda_device) if memory == "device" else HOST
        for info in infos:
            if info.device != wanted:
                raise InvalidArgumentError(
                    f"tensor '{info.name}' is on {device_text(info.device)}; this worker's "
                    f"{memory} bindings must all be on {device_text(wanted)}"
                )
        self.memory = memory
        self.cuda_device = cuda_device
        self._tensors = TensorArray(infos)  # the engine's memory, alive for the worker's lifetime

        # The C side holds these function pointers until wsync_worker_destroy returns.
        self._callbacks = (
            N.PAUSE_FN(self._pause),
            N.RESUME_FN(self._resume),
            N.APPLIED_FN(self._applied),
            N.WITHDRAW_FN(self._withdraw) if on_withdraw is not None else N.WITHDRAW_FN(),
        )
        config = N.WorkerConfig()
        lib.wsync_worker_config_init(ctypes.byref(config))
        connection, strings = N.connection(self.connection)
        agent = N.encode(agent_id)
        config.connection = connection
        config.agent_id = agent
        config.rank = rank
        config.memory = N.MEMORY_KINDS[memory]
        config.cuda_device = cuda_device if cuda_device is not None else 0
        config.registration_timeout_ms = int(registration_timeout * 1000)
        config.pause, config.resume, config.applied, config.withdraw = self._callbacks
        # A worker of a tensor-parallel (or expert-parallel) engine binds only its slices (docs/regions.md).
        self._slices = _regions.BoundRegionArray(slices or (), infos)
        config.regions, config.region_count = self._slices.pointer(), self._slices.count
        tensors_array = self._tensors

        def start():
            handle = ctypes.c_void_p()
            status = lib.wsync_worker_start(
                ctypes.byref(config), tensors_array.pointer(), tensors_array.count, ctypes.byref(handle)
            )
            return status, handle, N.last_error() if status != N.OK else ""

        def abandon(handle):
            self._closing = True
            lib.wsync_worker_destroy(handle)

        status, handle, text = N.interruptible(start, on_abandoned=abandon)
        del strings, agent
        if status != N.OK:
            raise N.error(status, text)
        self._lib = lib
        self._applied_version = lib.wsync_worker_applied_version
        self._handle = handle

    # -- callbacks (the agent's I/O thread; nothing may escape them) ------------------------------------------
    def _pause(self, _user_data, mode, round_, error, error_size) -> int:
        try:
            self._callback_thread = threading.get_ident()
            if self._closing:
                raise StoppedError("the worker is closing")
            if self._on_pause is not None:
                self._call(self._on_pause, N.PAUSE_MODE_NAMES.get(mode, str(mode)), round_)
            return 0
        except PauseWithdrawn as withdrawn:  # the bus called the pause off: not a failure of the engine's
            try:
                _write_error(error, error_size, str(withdrawn) or "withdrawn before the engine quiesced")
            except BaseException:  # noqa: BLE001
                pass
            return 1
        except BaseException as failure:  # noqa: BLE001 - a ctypes callback must not raise
            try:
                self.last_pause_error = failure
                _write_error(error, error_size, f"{type(failure).__name__}: {failure}")
            except BaseException:  # noqa: BLE001
                pass
            return 1

    def _resume(self, _user_data, version) -> None:
        try:
            self._callback_thread = threading.get_ident()
            if self._on_resume is not None and not self._closing:
                self._call(self._on_resume, version)
        except BaseException:  # noqa: BLE001 - a ctypes callback must not raise
            self.callback_errors += 1

    def _withdraw(self, _user_data, round_) -> None:
        # The agent's pause watch thread, while _pause runs on the I/O thread.
        try:
            if not self._closing:
                self._call(self._on_withdraw, round_)
        except BaseException:  # noqa: BLE001 - a ctypes callback must not raise
            self.callback_errors += 1

    def _applied(self, _user_data, version, round_) -> None:
        try:
            self._callback_thread = threading.get_ident()
            if self._on_applied is not None and not self._closing:
                self._call(self._on_applied, version, round_)
        except BaseException:  # noqa: BLE001 - a ctypes callback must not raise
            self.callback_errors += 1

    def _call(self, function: Callable, *args) -> Any:
        result = function(*args)
        if not inspect.isawaitable(result):
            return result
        loop = self._loop
        if loop is None:
            if inspect.iscoroutine(result):
                result.close()
            raise InvalidArgumentError(
                f"{getattr(function, '__name__', 'a callback')} returned an awaitable: pass "
                f"loop= (the asyncio loop it should run on)"
            )
        if loop.is_closed():
            if inspect.iscoroutine(result):
                result.close()
            raise StoppedError("the worker's asyncio loop is closed")
        future = asyncio.run_coroutine_threadsafe(_awaited(result), loop)
        while True:
            try:
                return future.result(N.SLICE_SECONDS)
            except concurrent.futures.TimeoutError:
                if self._closing or loop.is_closed():
                    future.cancel()
                    raise StoppedError("the worker closed while its callback ran on the loop") from None

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def applied_version(self) -> int:
        """The version the bound tensors hold: one atomic load in the agent, cheap enough for every decode step."""
        handle = self._handle
        if handle is None:
            raise StoppedError(f"worker '{self.agent_id}' is closed")
        return self._applied_version(handle)

    @property
    def committed_version(self) -> int:
        return self._lib.wsync_worker_committed_version(self._require_open())

    @property
    def rank(self) -> int:
        return self._lib.wsync_worker_rank(self._require_open())

    @property
    def counters(self) -> Counters:
        raw = N.WorkerCountersStruct()
        raw.struct_size = ctypes.sizeof(raw)
        N.check(self._lib.wsync_worker_counters_get(self._require_open(), ctypes.byref(raw)))
        return Counters(raw.rounds_applied, raw.rounds_aborted, raw.rounds_refused, raw.transfers_failed)

    def wait_for_version(self, version: int, timeout: float | None = None) -> int:
        """Waits until the applied version is at least `version`; returns it. TimeoutError when `timeout` seconds
        ran out, StoppedError when the agent stopped. None waits for ever, in slices: Ctrl-C works. Not from a
        callback."""
        if threading.get_ident() == self._callback_thread:
            raise InvalidArgumentError("wait_for_version from a worker callback would wait on itself")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            handle = self._require_open()
            remaining = N.SLICE_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
            status = self._lib.wsync_worker_wait_for_version(
                handle, version, int(min(remaining, N.SLICE_SECONDS) * 1000)
            )
            if status == N.OK:
                return self._applied_version(handle)
            if status != N.TIMEOUT:
                raise N.error(status)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"worker '{self.agent_id}': version {version} not applied within {timeout} s "
                    f"(it holds version {self._applied_version(handle)})"
                )

    async def wait_for_version_async(self, version: int, timeout: float | None = None) -> int:
        """wait_for_version() for asyncio code: never blocks the event loop (which coroutine callbacks need)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.applied_version < version:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"worker '{self.agent_id}': version {version} not applied within {timeout} s "
                    f"(it holds version {self.applied_version})"
                )
            await asyncio.sleep(0.005)
        return self.applied_version

    def _require_open(self):
        handle = self._handle
        if handle is None:
            raise StoppedError(f"worker '{self.agent_id}' is closed")
        return handle

    def close(self) -> None:
        """Says goodbye and stops the agent; waits for a callback in progress (a coroutine callback is cancelled).
        Idempotent; not from a callback: from one (on_withdraw's thread included) it raises InvalidArgumentError and
        the worker goes on."""
        if self._handle is None:
            return
        if threading.get_ident() == self._callback_thread:
            raise InvalidArgumentError("Worker.close() from one of its own callbacks would wait on itself")
        self._closing = True
        handle, self._handle = self._handle, None
        status = self._lib.wsync_worker_destroy(handle)
        if status != N.OK:  # refused (on_withdraw's thread): nothing was stopped
            text = N.last_error()
            self._handle, self._closing = handle, False
            raise N.error(status, text)

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"version {self.applied_version}"
        return f"<wsync.Worker '{self.agent_id}' on bus '{self.bus}' ({self._tensors.count} tensors, {state})>"


class PauseGate:
    """Between a worker's hooks and an engine's step loop (worker_agent/pause_gate.hpp's semantics):

        gate = wsync.PauseGate()
        worker = wsync.Worker(..., on_pause=gate.pause, on_resume=gate.resume)
        while serving:
            if gate.requested:         # None, or the mode: "abort" | "wait" | "keep"
                ...                    # end / drain / freeze requests as the mode says
                if not gate.park():    # blocks until resumed; False once closed
                    break
            step()

    pause() waits until the engine parks (or the gate closes); close() wakes everybody for good. Pass
    on_withdraw=gate.withdraw too, so that a pause the bus calls off while the engine drains ends the drain:
    pause() then raises PauseWithdrawn and `requested` is None again."""

    def __init__(self):
        self._condition = threading.Condition()
        self._request: str | None = None
        self._closed = False
        self._parked = False
        self._resumes = 0
        self._withdrawals = 0
        # A withdraw() the engine has not seen: set before _request is cleared, so an engine that reads None sees it
        # (and clears it); one that read the request before parks for nothing, and park() returns at once.
        self._withdrawn_unseen = False

    def pause(self, mode: str = "keep", round: int = 0) -> None:
        with self._condition:
            if self._closed or self._parked:
                return
            before = self._withdrawals
            self._withdrawn_unseen = False
            self._request = mode
            self._condition.wait_for(lambda: self._parked or self._closed or self._withdrawals != before)
            if not (self._parked or self._closed):
                raise PauseWithdrawn(
                    f"the pause for round {round} was withdrawn before the engine quiesced"
                    if round
                    else "the operator's pause was withdrawn before the engine quiesced"
                )

    def withdraw(self, round: int = 0) -> None:
        """Takes back a pause the engine has not parked for (any thread): `requested` is None again and pause()
        raises PauseWithdrawn. Nothing once the engine has parked: the worker resumes it as usual."""
        with self._condition:
            if self._parked or self._request is None:
                return
            self._withdrawn_unseen = True
            self._request = None
            self._withdrawals += 1
            self._condition.notify_all()

    def resume(self, version: int | None = None) -> None:
        with self._condition:
            self._request = None
            self._resumes += 1
            # Released now, not when the engine thread runs: a pause() right after must wait for a new park.
            self._parked = False
            self._condition.notify_all()

    @property
    def requested(self) -> str | None:
        """The pause mode the agent waits for, or None: one attribute read, for every step."""
        request = self._request
        if request is None and self._withdrawn_unseen:
            self._withdrawn_unseen = False  # seen: a park of the engine's own after this waits as ever
        return request

    def park(self) -> bool:
        """Declares the engine quiesced and waits for resume(): True when resumed, False when the gate closed. True
        at once when the pause the engine last read from `requested` was withdrawn since (nothing to park for)."""
        with self._condition:
            if self._closed:
                return False
            if self._withdrawn_unseen:
                self._withdrawn_unseen = False
                return True
            before = self._resumes
            self._parked = True
            self._condition.notify_all()
            while self._resumes == before and not self._closed:
                self._condition.wait(N.SLICE_SECONDS)  # in slices: Ctrl-C reaches a main-thread engine
            return self._resumes != before

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._request = None
            self._parked = False
            self._condition.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def parked(self) -> bool:
        with self._condition:
            return self._parked
