"""The worker side of the vLLM backend without vLLM: staging tensors bound to a wsync Worker, fed to load_weights.

A vLLM model's `load_weights(iterable of (name, tensor))` takes checkpoint names and renames, fuses (q/k/v into
qkv_proj, gate/up into gate_up_proj), shards (tensor parallel) and post-processes (quantization) as it copies. The
bus cannot write into the model's parameters directly: a trainer's `q_proj.weight` has no parameter of its own. So
each vLLM worker binds one staging tensor per trainer tensor (the trainer's name, dtype and shape) to its wsync
Worker; wsync receives, verifies and applies versions into the staging tensors, and an update hands them to
`load_weights`. docs/vllm.md says why, and what it costs.

Two parties touch the staging tensors, and never at the same time:
  - wsync writes them between its pause hook and its resume hook (a round in progress, or bindings torn by
    a transfer that did not commit: they are received in place);
  - vLLM reads them between `acquire()` and `release()` (from the first `update_weights` of an update to its
    `finish_weight_update`: vLLM's layerwise reload may keep references to them until it finalizes).
The pause hook waits for vLLM to release them for at most `staging_wait` seconds, then refuses the pause, which
aborts the round with that reason (AgentRefused) while vLLM keeps serving what it loaded.

Threading: the hooks run on the wsync agent's I/O thread; acquire/release/load_into on vLLM's worker thread.
torch and wsync are imported when a receiver is made, never when this module is imported.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..connection import Connection

# Below the coordinator's default pause timeout (30 s), so that a load holding the staging tensors past it refuses
# the pause with its reason rather than letting the round time out without one.
STAGING_WAIT_S = 20.0
# Once the trainer has seen its version committed, every worker applies it right after: seconds to allow for that.
APPLY_TIMEOUT_S = 60.0
# wsync.Worker's own default: how long a worker waits for the coordinator to register it.
REGISTRATION_TIMEOUT_S = 30.0
# Where the worker's agent id may come from; `{rank}` and `{dp}` are filled by the vLLM engine.
DEFAULT_AGENT_ID = "vllm-{host}-{pid}"


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the trainer's manifest: its checkpoint name, torch dtype name ("bfloat16") and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def manifest_from(
    names: Sequence[str], dtype_names: Sequence[str], shapes: Sequence[Sequence[int]]
) -> list[TensorSpec]:
    """The manifest as vLLM's update infos carry it (three parallel lists), checked: same lengths, unique names."""
    if not (len(names) == len(dtype_names) == len(shapes)):
        raise ValueError(
            f"names, dtype_names and shapes differ in length: {len(names)}, {len(dtype_names)}, {len(shapes)}"
        )
    seen: set[str] = set()
    specs = []
    for name, dtype, shape in zip(names, dtype_names, shapes, strict=True):
        if name in seen:
            raise ValueError(f"tensor {name!r} appears twice in the manifest")
        seen.add(name)
        specs.append(TensorSpec(str(name), str(dtype), tuple(int(d) for d in shape)))
    if not specs:
        raise ValueError("the manifest is empty")
    return specs


def agent_id_from(template: str | None, **fields: Any) -> str:
    """The worker's agent id: `template` with {host}, {pid} and the engine's fields ({rank}, {dp}) filled in."""
    values = {"host": socket.gethostname(), "pid": os.getpid(), **fields}
    try:
        return (template or DEFAULT_AGENT_ID).format(**values)
    except (KeyError, IndexError) as error:
        raise ValueError(
            f"agent id template {template!r} names an unknown field {error}; known: {sorted(values)}"
        ) from None


_MADV_DONTNEED = 4
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _give_back_pages(tensor: Any) -> int:
    """madvise(MADV_DONTNEED) over the whole pages inside a host tensor's bytes: their memory goes back to the
    kernel and reads as zeros until written again. The partial pages at either end stay (they may hold an
    allocator's header or another allocation). Returns the bytes given back."""
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first = (start + _PAGE_BYTES - 1) // _PAGE_BYTES * _PAGE_BYTES
    last = end // _PAGE_BYTES * _PAGE_BYTES
    if last <= first:
        return 0
    if _libc().madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED) != 0:
        return 0  # the pages stay: only memory is lost, never bytes a reader needs
    return last - first


class StagingReceiver:
    """A wsync Worker over staging tensors laid out as the trainer's manifest, and the guard between wsync writing
    them and vLLM reading them.

    `memory` is wsync's: "host" (the shm channel; staging in host memory, pinned when the model is on a GPU) or
    "device" (nccl and cuda_ipc; staging on `device`). Default: "device" when `device` is a CUDA device, else host.
    """

    def __init__(
        self,
        bus: str | Connection,
        manifest: Sequence[TensorSpec],
        *,
        device: Any = None,
        memory: str | None = None,
        agent_id: str | None = None,
        registration_timeout: float = REGISTRATION_TIMEOUT_S,
        staging_wait: float = STAGING_WAIT_S,
    ) -> None:
        import torch

        import wsync

        device = torch.device("cpu") if device is None else torch.device(device)
        on_gpu = device.type == "cuda"
        if memory is None:
            memory = "device" if on_gpu else "host"
        if memory not in ("host", "device"):
            raise ValueError(f"staging memory {memory!r} is neither 'host' nor 'device'")
        if memory == "device" and not on_gpu:
            raise ValueError(f"device staging needs a CUDA device, and the model is on {device}")

        self._staging_wait = staging_wait
        self._cond = threading.Condition()
        self._paused = False  # wsync may be writing the staging tensors
        self._held_version: int | None = None  # vLLM is reading the staging tensors (this version)
        self._withdrawals = 0  # pauses the bus called off while _on_pause waited for vLLM
        self._pause_mode: str | None = None
        self._on_device = memory == "device"
        self._device = device
        # Pageable host staging (a CPU engine's) can give its pages back between versions; pinned pages cannot.
        self._pageable = memory == "host" and not on_gpu
        self._given_back_version: int | None = None  # its pages were given back after this version loaded

        self._staging: dict[str, Any] = {}
        for spec in manifest:
            dtype = getattr(torch, spec.dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"tensor {spec.name!r}: {spec.dtype!r} is not a torch dtype")
            if self._on_device:
                tensor = torch.empty(spec.shape, dtype=dtype, device=device)
            else:
                tensor = torch.empty(spec.shape, dtype=dtype, device="cpu", pin_memory=on_gpu)
            self._staging[spec.name] = tensor

        cuda_device = None
        if self._on_device:
            cuda_device = torch.cuda.current_device() if device.index is None else device.index
        self._worker = wsync.Worker(
            bus,
            agent_id=agent_id or agent_id_from(None),
            tensors=self._staging,
            on_pause=self._on_pause,
            on_resume=self._on_resume,
            on_withdraw=self._on_withdraw,
            # vLLM never serves from the staging tensors, so a round may land in them directly: a host worker's
            # own staging copy of the round would be a second copy of the model. A round that fails then leaves
            # them holding no version, and wsync keeps them "paused" (unreadable here) until one commits.
            memory="host_in_place" if memory == "host" else memory,
            cuda_device=cuda_device,
            registration_timeout=registration_timeout,
        )

    # -- what vLLM's worker thread calls -----------------------------------------------------------------------

    @property
    def applied_version(self) -> int:
        """The version the staging tensors hold (0: none yet)."""
        return self._worker.applied_version

    @property
    def worker(self) -> Any:
        """The wsync Worker (counters, committed_version, rank)."""
        return self._worker

    def staged(self) -> list[tuple[str, Any]]:
        """(trainer name, staging tensor) in manifest order: what load_weights takes. Read only while acquired."""
        return list(self._staging.items())

    def acquire(self, version: int, timeout: float = APPLY_TIMEOUT_S) -> int:
        """Waits until the staging tensors hold exactly `version` and wsync is not writing them, then keeps wsync
        from writing them until release(). Returns the version. Raises TimeoutError (wsync's) when it does not come
        in time, ValueError when the staging tensors already hold a newer version (loading it under the older
        version's name would mislabel every output)."""
        version = int(version)
        with self._cond:
            if version == self._given_back_version:
                raise ValueError(
                    f"version {version} was loaded already, and its staging given back: load a newer version"
                )
            if self._held_version is not None:
                if self._held_version == version:
                    return version
                raise RuntimeError(
                    f"the staging tensors are held for version {self._held_version}; finish that update first"
                )
        deadline = time.monotonic() + timeout
        self._worker.wait_for_version(version, timeout=timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: not self._paused, timeout=max(0.0, deadline - time.monotonic())):
                import wsync

                raise wsync.TimeoutError(
                    f"version {version} was applied, but a newer round has held the staging tensors for "
                    f"{timeout} s (pause mode {self._pause_mode})"
                )
            applied = self._worker.applied_version
            if applied != version:
                raise ValueError(
                    f"the staging tensors hold version {applied}, not {version}: a newer version was published "
                    f"before this update loaded; ask for version {applied}"
                )
            self._held_version = applied
            return applied

    def release(self) -> None:
        """Lets wsync write the staging tensors again. Waits for the device's copies out of them first."""
        if self._on_device:
            import torch

            torch.cuda.synchronize(self._device)
        with self._cond:
            self._held_version = None
            self._cond.notify_all()

    def give_back(self, version: int) -> int:
        """After `version` was loaded (and released): gives the staging tensors' pages back to the kernel, so that
        between versions a CPU engine holds no copy of the model. The memory stays bound and mapped; the next round
        faults fresh pages in as it writes every byte of them, and vLLM reads them only once a version has
        committed into them (acquire). Pinned and device staging keep their memory. Returns the bytes given back."""
        if not self._pageable:
            return 0
        with self._cond:
            if self._held_version is not None or self._paused:
                return 0  # vLLM or a round has them: the next finish gives them back
            self._given_back_version = int(version)
            return sum(_give_back_pages(tensor) for tensor in self._staging.values())

    def load_into(self, model: Any, version: int, timeout: float = APPLY_TIMEOUT_S, keep: bool = False) -> int:
        """Acquires `version` and feeds the staging tensors to `model.load_weights`. Releases them afterwards unless
        `keep` (vLLM's engine keeps them until finish_weight_update); always on failure."""
        loaded = self.acquire(version, timeout)
        try:
            model.load_weights(self.staged())
        except BaseException:
            self.release()
            raise
        if not keep:
            self.release()
        return loaded

    def close(self) -> None:
        """Stops the wsync Worker (says goodbye) and drops the staging tensors. Idempotent."""
        worker, self._worker = getattr(self, "_worker", None), None
        if worker is not None:
            worker.close()
        self._staging = {}
        with self._cond:
            self._held_version = None
            self._cond.notify_all()

    # -- wsync's hooks (the agent's I/O thread) --------------------------------------------------------------

    def _on_pause(self, mode: str, round: int) -> None:
        with self._cond:
            before = self._withdrawals
            if not self._cond.wait_for(
                lambda: self._held_version is None or self._withdrawals != before, timeout=self._staging_wait
            ):
                raise RuntimeError(
                    f"vLLM still holds the staging tensors for version {self._held_version} after "
                    f"{self._staging_wait} s (an update between start_weight_update and finish_weight_update); "
                    f"round {round} is refused and vLLM keeps its weights"
                )
            if self._held_version is not None:
                import wsync

                raise wsync.PauseWithdrawn(
                    f"round {round} ended while vLLM held the staging tensors for version {self._held_version}"
                )
            self._paused = True
            self._pause_mode = mode

    def _on_withdraw(self, round: int) -> None:
        # Another thread of the agent's, while _on_pause may wait for vLLM to let go of the staging tensors.
        with self._cond:
            self._withdrawals += 1
            self._cond.notify_all()

    def _on_resume(self, version: int) -> None:
        with self._cond:
            self._paused = False
            self._pause_mode = None
            self._cond.notify_all()

    def __enter__(self) -> StagingReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
