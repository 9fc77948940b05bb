"""The trainer agent: declare a manifest, publish versions from tensors in place, learn each version's outcome."""

from __future__ import annotations

import asyncio
import ctypes
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import _native as N
from . import _regions
from ._closing import Closing
from ._tensors import HOST, TensorArray, TensorInfo, describe, device_text, named_items
from .connection import Connection
from .errors import (
    AbortedError,
    BusyError,
    InternalError,
    InvalidArgumentError,
    ManifestMismatchError,
    RefusedError,
    StoppedError,
    TimeoutError,
)
from .outcome import Outcome, OutcomeKind

__all__ = ["Trainer", "PublishHandle", "Progress"]


@dataclass(frozen=True)
class Progress:
    version: int
    bytes_sent: int
    bytes_total: int
    sending: bool


def _outcome(raw: N.OutcomeStruct) -> Outcome:
    lib = N.lib()
    kind = N.OUTCOME_KINDS.get(raw.kind)
    if kind is None:
        raise InternalError(f"version {raw.version}: an outcome of kind {raw.kind}, which this package does not know")
    reason = N.text(lib.wsync_abort_reason_name(raw.abort_reason)) if raw.abort_reason else None
    refusal = N.text(lib.wsync_refusal_name(raw.refusal)) if raw.refusal else None
    return Outcome(
        version=raw.version,
        kind=kind,
        reason=reason,
        refusal=refusal,
        detail=N.text(raw.detail),
        round=raw.round,
        bytes=raw.bytes,
        digest=(raw.digest_lo, raw.digest_hi),
        until_plan=raw.until_plan_ns / 1e9,
        sending=raw.sending_ns / 1e9,
        total=raw.total_ns / 1e9,
    )


class PublishHandle:
    """A version handed to the trainer agent. ``wait()`` gives its Outcome once the round ends."""

    def __init__(self, trainer: Trainer, version: int, keep: Any, allocations_kept: bool = False):
        self._trainer = trainer
        self.version = version
        self._keep = keep  # the tensors, alive until the outcome is known
        self._outcome: Outcome | None = None
        # Whether wsync was told that no tensor's allocation was freed since the previous publish (cuda_ipc then
        # trusts its exports instead of checking each allocation): see Trainer._allocations_kept.
        self.allocations_kept = allocations_kept

    @property
    def outcome(self) -> Outcome | None:
        """The Outcome once known (after wait() or done()), else None."""
        return self._outcome

    def done(self) -> bool:
        """Whether the outcome is known; polls, never blocks."""
        return self._outcome is not None or self._trainer._collect(self, 0)

    def wait(self, timeout: float | None = None) -> Outcome:
        """The Outcome when the version committed. Raises AbortedError / RefusedError (with ``.outcome``) when it
        did not, TimeoutError when `timeout` seconds ran out first (the version is still in flight: wait again).
        None waits for ever, in slices: Ctrl-C works."""
        if self._outcome is None and not self._trainer._collect(self, timeout):
            raise TimeoutError(f"version {self.version}: no outcome within {timeout} s (still in flight)")
        return self._result()

    async def wait_async(self, timeout: float | None = None) -> Outcome:
        """wait() for asyncio code: polls in slices without blocking the event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"version {self.version}: no outcome within {timeout} s")
            await asyncio.sleep(0.005)
        return self._result()

    def _settle(self, outcome: Outcome) -> None:
        self._outcome = outcome
        self._keep = None

    def _result(self) -> Outcome:
        outcome = self._outcome
        assert outcome is not None
        if outcome.kind is OutcomeKind.COMMITTED:
            return outcome
        if outcome.kind is OutcomeKind.REFUSED:
            raise RefusedError(outcome)
        raise AbortedError(outcome)

    def __repr__(self) -> str:
        state = self._outcome.kind if self._outcome else "in flight"
        return f"<wsync.PublishHandle version {self.version}: {state}>"


class Trainer(Closing):
    """One trainer rank's agent on bus `bus` (a name, or a Connection for a bus on another host). The first publish
    declares the manifest: names, dtypes and shapes in the order given; every later version carries exactly those
    tensors.

    A sharded trainer (FSDP2, TP: a state dict of torch DTensors) needs no gather: every rank makes its own Trainer
    and publishes its own state dict; each sends only its shards (docs/regions.md), and the version commits once
    every rank has sent and every worker has taken its slices. Its rank among the trainer's ranks is
    `source_rank` of `source_count` (by default torch.distributed's rank and world size)."""

    def __init__(
        self,
        bus: str | Connection,
        agent_id: str = "trainer-0",
        channel: str = "shm",
        cuda_device: int | None = None,
        rank: int = -1,
        source_rank: int | None = None,
        source_count: int | None = None,
    ):
        if channel not in N.CHANNELS:
            raise InvalidArgumentError(f"channel '{channel}': use one of {', '.join(N.CHANNELS)}")
        lib = N.lib()
        self.connection = Connection.of(bus)
        self.bus = self.connection.bus
        self.agent_id = agent_id
        self.channel = channel
        if channel not in N.HOST_CHANNELS and cuda_device is None:
            torch = sys.modules.get("torch")
            cuda_device = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
        self.cuda_device = cuda_device
        config = N.TrainerConfig()
        lib.wsync_trainer_config_init(ctypes.byref(config))
        connection, strings = N.connection(self.connection)
        agent = N.encode(agent_id)
        config.connection = connection
        config.agent_id = agent
        config.rank = rank
        config.channel = N.CHANNELS[channel]
        config.cuda_device = cuda_device if cuda_device is not None else 0

        def start():
            handle = ctypes.c_void_p()
            status = lib.wsync_trainer_start(ctypes.byref(config), ctypes.byref(handle))
            return status, handle, N.last_error() if status != N.OK else ""

        status, handle, text = N.interruptible(start, on_abandoned=lib.wsync_trainer_destroy)
        del strings, agent  # read during the call only
        if status != N.OK:
            raise N.error(status, text)
        self._lib = lib
        self._handle: ctypes.c_void_p | None = handle
        self._lock = threading.RLock()
        self._manifest: TensorArray | None = None  # names, dtypes, shapes; pointers of the last publish
        self._agent_has_manifest_memory = False  # the agent accepted a publish of the manifest's current pointers
        self._index = {}  # name -> position in the manifest
        self._sync_plan: list[tuple[int, bool]] = []  # CUDA devices of the last publish, device-wide sync or not
        self._frees_seen: list[tuple[int, int]] | None = None  # torch's cudaFree count per device at the last publish
        self._in_flight: PublishHandle | None = None
        self._options = N.PublishOptions()
        lib.wsync_publish_options_init(ctypes.byref(self._options))
        self._source = (source_rank, source_count)
        self._shards: _regions.Shards | None = None  # a sharded trainer's last publish
        self._holdings_key: tuple | None = None  # what the agent holds declared

    # -- publishing ------------------------------------------------------------------------------------------
    def declare(self, tensors: Any) -> list[str]:
        """Declares (or replaces) the manifest from tensors without publishing; returns its names. publish()
        does this itself on its first call."""
        with self._lock:
            infos = self._convert(named_items(tensors, "declare"))
            self._declare(infos)
            return [info.name for info in infos]

    def publish(
        self,
        version: int,
        tensors: Any = None,
        label: str | None = None,
        pause_mode: str = "keep",
        stream: Any = None,
        event: Any = None,
    ) -> PublishHandle:
        """Starts publishing `version` (> the bus's committed version) and returns at once.

        tensors: a mapping name -> tensor (a state_dict), an iterable of (name, tensor) (model.named_parameters()),
        or None to publish the previous publish's tensors again (the same memory, updated in place: no per-tensor
        work here, the fast path for large manifests). The tensors must not change until the outcome is known.
        CUDA stream rule: `event` is synchronised if given, else `stream`, else the current CUDA stream of the
        tensors' device, before the agent reads anything."""
        mode = N.PAUSE_MODES.get(pause_mode)
        if mode is None:
            raise InvalidArgumentError(f"pause_mode '{pause_mode}': use one of {', '.join(N.PAUSE_MODES)}")
        if not isinstance(version, int) or version < 0 or version >= 1 << 64:
            raise InvalidArgumentError(f"version {version!r}: versions are integers in [0, 2^64)")
        shards = self._shards if tensors is None else None
        if tensors is not None:
            tensors = named_items(tensors, "publish")  # once: a generator (named_parameters()) reads only once
            shards = _regions.split(tensors, *self._source)
        if shards is not None:
            return self._publish_shards(version, shards, label, mode, stream, event)
        with self._lock:
            handle = self._require_open()
            self._settle_previous()
            # The agent already holds the tensors' memory when the last publish with tensors was accepted: None then
            # hands it nothing to check (about 0.1 us a tensor, 6-9 ms for 100,000).
            same = tensors is None and self._agent_has_manifest_memory
            if tensors is None:
                manifest = self._manifest
                if manifest is None:
                    raise InvalidArgumentError(
                        "publish(version, None) repeats the previous publish's tensors, and "
                        "there was none: pass the tensors the first time"
                    )
            elif self._manifest is None:
                self._declare(self._convert(named_items(tensors, "publish")))
                manifest = self._manifest
            else:
                self._agent_has_manifest_memory = False  # the array is rebound before the agent accepts it
                manifest = self._rebind(named_items(tensors, "publish"))
            self._synchronise(stream, event)
            kept = self._allocations_kept()
            flags = N.PUBLISH_SAME_TENSORS if same else 0
            self._publish_call(handle, version, None if same else manifest, label, mode, kept, flags)
            self._agent_has_manifest_memory = True
            published = PublishHandle(self, version, manifest.infos, kept)
            self._in_flight = published
            return published

    def _publish_shards(
        self, version: int, shards: _regions.Shards, label: str | None, mode: int, stream: Any, event: Any
    ) -> PublishHandle:
        """publish() for a rank of a sharded trainer: the manifest of the global tensors, the holdings of its shards,
        and its local shards as the buffers (one a region)."""
        with self._lock:
            handle = self._require_open()
            self._settle_previous()
            if self._manifest is None:
                self._declare(shards.manifest)
            elif self._manifest_key() != shards.manifest_key():
                raise ManifestMismatchError(
                    "the state dict's tensors differ from the declared manifest (a trainer declares one manifest "
                    "for its life)"
                )
            if self._holdings_key != shards.holdings_key():
                regions = _regions.RegionArray(shards.regions)
                N.check(
                    self._lib.wsync_trainer_declare_holdings(
                        handle, regions.array, regions.count, shards.rank, shards.count
                    )
                )
                self._holdings_key = shards.holdings_key()
            for info in shards.local:
                self._check_place(info)
            local = TensorArray(shards.local)
            self._plan_sync(shards.local)
            self._synchronise(stream, event)
            kept = self._allocations_kept()
            self._publish_call(handle, version, local, label, mode, kept, 0)
            self._agent_has_manifest_memory = False
            self._shards = shards
            published = PublishHandle(self, version, (local, shards), kept)
            self._in_flight = published
            return published

    def _publish_call(
        self, handle, version: int, array: TensorArray | None, label: str | None, mode: int, kept: bool, flags: int
    ) -> None:
        """wsync_trainer_publish with this trainer's options (`array` None: the same tensors again)."""
        options = self._options
        label_bytes = N.encode(label)
        options.label = label_bytes
        options.pause_mode = mode
        options.flags = (N.PUBLISH_ALLOCATIONS_KEPT if kept else 0) | flags
        status = self._lib.wsync_trainer_publish(
            handle,
            version,
            None if array is None else array.pointer(),
            0 if array is None else array.count,
            ctypes.byref(options),
        )
        options.label = None
        if status != N.OK:
            raise N.error(status)

    def _manifest_key(self) -> tuple:
        return tuple((info.name, info.dtype, info.shape) for info in self._manifest.infos)

    def _settle_previous(self) -> None:
        previous = self._in_flight
        if previous is not None and not previous.done():
            raise BusyError(f"version {previous.version} is still in flight: wait for its outcome first")

    def _convert(self, pairs) -> list[TensorInfo]:
        infos = [describe(name, tensor) for name, tensor in pairs]
        seen = set()
        for info in infos:
            if info.name in seen:
                raise InvalidArgumentError(f"tensor '{info.name}' is given twice")
            seen.add(info.name)
            self._check_place(info)
        return infos

    def _check_place(self, info: TensorInfo) -> None:
        if self.channel in N.HOST_CHANNELS:
            if info.device != HOST:
                raise InvalidArgumentError(
                    f"tensor '{info.name}' is on {device_text(info.device)}; the {self.channel} "
                    f"channel takes host tensors (use channel 'nccl' or 'cuda_ipc' for GPU "
                    f"tensors)"
                )
        elif info.device != ("cuda", self.cuda_device):
            raise InvalidArgumentError(
                f"tensor '{info.name}' is on {device_text(info.device)}; this trainer's "
                f"{self.channel} channel takes tensors on cuda:{self.cuda_device}"
            )

    def _declare(self, infos: list[TensorInfo]) -> None:
        manifest = TensorArray(infos)
        N.check(self._lib.wsync_trainer_declare_manifest(self._require_open(), manifest.pointer(), manifest.count))
        self._manifest = manifest
        self._agent_has_manifest_memory = False
        self._index = {info.name: position for position, info in enumerate(infos)}
        self._plan_sync(infos)

    def _rebind(self, pairs) -> TensorArray:
        """The manifest's array pointing at these tensors, after checking them against it."""
        manifest = self._manifest
        assert manifest is not None
        expected = manifest.infos
        if len(pairs) != len(expected) or any(pair[0] != info.name for pair, info in zip(pairs, expected)):
            pairs = self._in_manifest_order(pairs)
        infos = []
        for (name, tensor), declared in zip(pairs, expected):
            info = describe(name, tensor)
            if info.dtype != declared.dtype:
                raise ManifestMismatchError(
                    f"tensor '{name}': dtype {N.DTYPE_NAMES[info.dtype]}, declared {N.DTYPE_NAMES[declared.dtype]}",
                    tensor=name,
                )
            if info.shape != declared.shape:
                raise ManifestMismatchError(
                    f"tensor '{name}': shape {list(info.shape)}, declared {list(declared.shape)}", tensor=name
                )
            self._check_place(info)
            infos.append(info)
        array = manifest.array
        for position, info in enumerate(infos):
            entry = array[position]
            entry.data = info.data or None
            entry.bytes = info.nbytes
        manifest.infos = infos
        self._plan_sync(infos)
        return manifest

    def _in_manifest_order(self, pairs):
        given = {}
        for name, tensor in pairs:
            if name not in self._index:
                raise ManifestMismatchError(f"tensor '{name}' is not in the declared manifest", tensor=name)
            if name in given:
                raise InvalidArgumentError(f"tensor '{name}' is given twice")
            given[name] = tensor
        for info in self._manifest.infos:
            if info.name not in given:
                raise ManifestMismatchError(
                    f"tensor '{info.name}' is in the declared manifest but not given", tensor=info.name
                )
        return [(info.name, given[info.name]) for info in self._manifest.infos]

    # -- the CUDA stream rule ------------------------------------------------------------------------------------
    def _plan_sync(self, infos: list[TensorInfo]) -> None:
        torch = sys.modules.get("torch")
        plan = {}
        for info in infos:
            if info.device[0] == "cuda":
                foreign = torch is None or not isinstance(info.obj, torch.Tensor)
                plan[info.device[1]] = plan.get(info.device[1], False) or foreign
        self._sync_plan = sorted(plan.items())

    def _synchronise(self, stream: Any, event: Any) -> None:
        if event is not None:
            event.synchronize()
            return
        if stream is not None:
            stream.synchronize()
            return
        if not self._sync_plan:
            return
        torch = sys.modules.get("torch")
        if torch is None:
            raise InvalidArgumentError(
                "CUDA tensors from a DLPack producer other than torch: pass stream= or event= "
                "(an object with .synchronize()) that orders the writes before the publish"
            )
        for device, device_wide in self._sync_plan:
            if device_wide:  # another library's streams: only the whole device is certain
                torch.cuda.synchronize(device)
            else:
                torch.cuda.current_stream(device).synchronize()

    # -- whether the tensors' allocations were kept ---------------------------------------------------------------
    def _allocations_kept(self) -> bool:
        """Whether no tensor at the address it had in the previous publish can have been freed and allocated again
        since: true when every CUDA tensor is torch's and torch's allocator called cudaFree on none of their devices
        in between (memory_stats' num_device_free; torch frees a block only so, and keeps freed tensors' memory in
        its cache otherwise). cuda_ipc then skips checking each exported allocation with the driver (about 0.4 us
        each: 40 ms a round for 100,000 allocations). Another library's frees nobody counts: never kept then."""
        if self.channel != "cuda_ipc" or not self._sync_plan:
            return False
        torch = sys.modules.get("torch")
        if torch is None or any(device_wide for _, device_wide in self._sync_plan):
            return False
        seen = []
        for device, _ in self._sync_plan:
            frees = torch.cuda.memory_stats_as_nested_dict(device).get("num_device_free")
            if frees is None:  # a torch that does not count them
                self._frees_seen = None
                return False
            seen.append((device, frees))
        kept = self._frees_seen == seen
        self._frees_seen = seen
        return kept

    # -- outcomes ----------------------------------------------------------------------------------------------
    def _collect(self, published: PublishHandle, timeout: float | None) -> bool:
        """Waits up to `timeout` (None: for ever; 0: poll) for `published`'s outcome, in slices; whether it came."""
        raw = N.OutcomeStruct()
        raw.struct_size = ctypes.sizeof(raw)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if published._outcome is not None:
                    return True
                if published is not self._in_flight:
                    raise StoppedError(f"version {published.version}: its trainer no longer waits for it")
                handle = self._require_open()
                remaining = N.SLICE_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
                slice_ms = int(min(remaining, N.SLICE_SECONDS) * 1000)
                status = self._lib.wsync_trainer_wait(handle, slice_ms, ctypes.byref(raw))
                if status == N.OK:
                    published._settle(_outcome(raw))
                    self._in_flight = None
                    return True
                if status != N.TIMEOUT:
                    raise N.error(status)
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def committed_version(self) -> int:
        """The bus's committed version as this agent knows it."""
        return self._lib.wsync_trainer_committed_version(self._require_open())

    @property
    def rank(self) -> int:
        return self._lib.wsync_trainer_rank(self._require_open())

    @property
    def manifest(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """The declared manifest: (name, dtype name, shape) in order; [] before the first publish."""
        if self._manifest is None:
            return []
        return [(info.name, N.DTYPE_NAMES[info.dtype], info.shape) for info in self._manifest.infos]

    def progress(self) -> Progress:
        raw = N.ProgressStruct()
        raw.struct_size = ctypes.sizeof(raw)
        N.check(self._lib.wsync_trainer_progress(self._require_open(), ctypes.byref(raw)))
        return Progress(raw.version, raw.bytes_sent, raw.bytes_total, bool(raw.sending))

    def _require_open(self):
        handle = self._handle
        if handle is None:
            raise StoppedError(f"trainer '{self.agent_id}' is closed")
        return handle

    def close(self) -> None:
        """Says goodbye and stops the agent (a version in flight is abandoned). Idempotent."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._lib.wsync_trainer_destroy(handle)
            self._in_flight = None

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"{len(self.manifest)} tensors"
        return f"<wsync.Trainer '{self.agent_id}' on bus '{self.bus}' ({self.channel}, {state})>"
