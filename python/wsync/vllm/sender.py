"""The trainer side of the vLLM backend, without vLLM: publish a version over wsync, then have vLLM load it.

One update, as `WsyncSender.sync` runs it:
  1. `Trainer.publish(version, tensors, pause_mode)` and wait for the outcome. The bytes reach every vLLM worker's
     staging tensors while vLLM goes on generating; an abort or refusal raises here, before vLLM is touched.
  2. `pause(mode)` if given: the caller's way to pause vLLM's generation (e.g. `AsyncLLM.pause_generation`), with
     the same pause mode (modes.py).
  3. vLLM's own update, through a client (vLLM's `VLLMWeightSyncClient` protocol: `HTTPVLLMWeightSyncClient`,
     `RayVLLMWeightSyncClient`, or `LLMClient` below for an `LLM` in this process): `start_weight_update()`,
     `update_weights({"version": v})` (each worker feeds its staging tensors to `model.load_weights`),
     `finish_weight_update(weight_version=str(v))`, which tags vLLM's outputs with wsync's version.
  4. `resume()` if given.

The client is duck-typed, so nothing here imports vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..connection import Connection
from .modes import check_pause_mode
from .staging import APPLY_TIMEOUT_S, TensorSpec

# A version's bytes through the bus, from publish to outcome; a version that takes longer raises TimeoutError
# (it is still in flight: wait on `last_handle` again).
PUBLISH_TIMEOUT_S = 300.0

# The worker staging memory each trainer channel needs (wsync binds host memory for shm, device memory else).
_WORKER_MEMORY = {"shm": "host", "tcp": "host", "nccl": "device", "cuda_ipc": "device"}


def named_items(tensors: Any) -> list[tuple[str, Any]]:
    """A mapping (state_dict) or an iterable of (name, tensor) (named_parameters()) as a list of pairs."""
    if hasattr(tensors, "items"):
        return [(str(name), tensor) for name, tensor in tensors.items()]
    if isinstance(tensors, Iterable):
        return [(str(name), tensor) for name, tensor in tensors]
    raise TypeError(f"expected a mapping or an iterable of (name, tensor), got {type(tensors).__name__}")


def dtype_name(dtype: Any) -> str:
    """A torch or numpy dtype as vLLM names it in update infos ("bfloat16", "float8_e4m3fn")."""
    return str(dtype).removeprefix("torch.")


def manifest_of(tensors: Any) -> list[TensorSpec]:
    """The manifest (name, dtype, shape) of named tensors, in their order."""
    return [TensorSpec(name, dtype_name(t.dtype), tuple(int(d) for d in t.shape)) for name, t in named_items(tensors)]


def init_info_for(
    bus: str | Connection,
    manifest: Iterable[TensorSpec],
    *,
    memory: str | None = None,
    agent_id: str | None = None,
    registration_timeout: float | None = None,
    layerwise_reload: bool | None = None,
) -> dict[str, Any]:
    """The worker-side init info of backend "wsync" as a plain dict (JSON-safe, for HTTP too): what
    `init_weight_transfer_engine` takes. `bus` is as the vLLM workers' hosts see it (a Connection's fields travel
    as the strings "transport", "curve_keys", "server_key"); None keeps the worker's default."""
    manifest = list(manifest)
    connection = Connection.of(bus)
    info: dict[str, Any] = {
        "bus": connection.bus,
        "names": [spec.name for spec in manifest],
        "dtype_names": [spec.dtype for spec in manifest],
        "shapes": [list(spec.shape) for spec in manifest],
    }
    optional = {
        "memory": memory,
        "agent_id": agent_id,
        "transport": connection.transport,
        "curve_keys": None if connection.curve_keys is None else str(connection.curve_keys),
        "server_key": None if connection.server_key is None else str(connection.server_key),
        "registration_timeout": registration_timeout,
        "layerwise_reload": layerwise_reload,
    }
    info.update({key: value for key, value in optional.items() if value is not None})
    return info


def update_info_for(version: int, timeout: float = APPLY_TIMEOUT_S) -> dict[str, Any]:
    """The update info of backend "wsync": which version every worker loads, and how long it may wait for it."""
    return {"version": int(version), "timeout": float(timeout)}


class LLMClient:
    """vLLM's `VLLMWeightSyncClient` protocol over an offline `vllm.LLM` (or anything with its RL methods), whose
    methods take request dicts ({"init_info": ...}, {"update_info": ...}) rather than the bare infos."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


class WsyncSender:
    """A wsync Trainer that publishes versions for vLLM workers running backend "wsync", and drives their update.

    `bus` is the trainer's way to the bus (a name, or a wsync.Connection). `channel` is the trainer's ("shm", "tcp",
    "nccl", "cuda_ipc"); the workers stage in the memory it needs. `worker_*` are the workers' own settings, sent in
    the init info: their agent id template, and `worker_connection`, the bus as the workers' hosts reach it (default:
    the bus's name, on their own host).
    """

    def __init__(
        self,
        bus: str | Connection,
        *,
        agent_id: str = "trainer-0",
        channel: str = "shm",
        pause_mode: str = "keep",
        cuda_device: int | None = None,
        rank: int = -1,
        publish_timeout: float = PUBLISH_TIMEOUT_S,
        apply_timeout: float = APPLY_TIMEOUT_S,
        worker_agent_id: str | None = None,
        worker_connection: Connection | None = None,
        layerwise_reload: bool | None = None,
    ) -> None:
        import wsync

        if channel not in _WORKER_MEMORY:
            raise ValueError(f"channel {channel!r} is not one of {sorted(_WORKER_MEMORY)}")
        connection = Connection.of(bus)
        self.bus = connection.bus
        self.channel = channel
        self.pause_mode = check_pause_mode(pause_mode)
        self.publish_timeout = publish_timeout
        self.apply_timeout = apply_timeout
        self._worker_connection = Connection.of(self.bus if worker_connection is None else worker_connection)
        self._worker_settings = {
            "memory": _WORKER_MEMORY[channel],
            "agent_id": worker_agent_id,
            "layerwise_reload": layerwise_reload,
        }
        self._last_version = 0
        self.last_handle: Any = None
        self._trainer = wsync.Trainer(
            connection,
            agent_id=agent_id,
            channel=channel,
            cuda_device=cuda_device,
            rank=rank,
        )

    @property
    def trainer(self) -> Any:
        """The wsync Trainer (committed_version, progress())."""
        return self._trainer

    def init_info(self, manifest_or_tensors: Any) -> dict[str, Any]:
        """The workers' init info for a manifest (TensorSpecs) or for named tensors."""
        items = (
            list(manifest_or_tensors.items()) if hasattr(manifest_or_tensors, "items") else list(manifest_or_tensors)
        )
        manifest = items if all(isinstance(item, TensorSpec) for item in items) else manifest_of(items)
        return init_info_for(self._worker_connection, manifest, **self._worker_settings)

    def init(self, client: Any, manifest_or_tensors: Any) -> None:
        """`client.init_weight_transfer_engine` with the init info: every vLLM worker binds its staging tensors
        and joins the bus. Call once, before the first sync, and again when the manifest changes."""
        client.init_weight_transfer_engine(self.init_info(manifest_or_tensors))

    def next_version(self) -> int:
        return max(self._trainer.committed_version, self._last_version) + 1

    def publish(self, tensors: Any, version: int | None = None, label: str | None = None) -> Any:
        """Publishes `tensors` (a mapping, an iterable of (name, tensor), or None for the previous publish's
        tensors again) as `version` (default: the next one) and waits for its outcome. Returns the Outcome;
        raises wsync's AbortedError / RefusedError / TimeoutError."""
        version = self.next_version() if version is None else int(version)
        if tensors is not None:
            tensors = named_items(tensors)
        self.last_handle = self._trainer.publish(version, tensors, label=label, pause_mode=self.pause_mode)
        self._last_version = version
        return self.last_handle.wait(timeout=self.publish_timeout)

    def sync(
        self,
        client: Any,
        tensors: Any,
        version: int | None = None,
        *,
        label: str | None = None,
        pause: Callable[[str], None] | None = None,
        resume: Callable[[], None] | None = None,
    ) -> int:
        """One update: publish over wsync, then vLLM's start / update_weights / finish_weight_update(weight_version)
        through `client`, between `pause(mode)` and `resume()` when given. Returns the version vLLM now serves."""
        outcome = self.publish(tensors, version, label)
        version = outcome.version
        if pause is not None:
            pause(self.pause_mode)
        try:
            client.start_weight_update()
            client.update_weights(update_info_for(version, self.apply_timeout))
            client.finish_weight_update(weight_version=str(version))
        finally:
            if resume is not None:
                resume()
        return version

    def close(self) -> None:
        self._trainer.close()

    def __enter__(self) -> WsyncSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
