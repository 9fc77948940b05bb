"""vLLM's weight-transfer engines for backend "wsync" (vLLM's interfaces of 0.32 and 0.33: docs/vllm.md).

Imported by vLLM's registry when a worker creates the "wsync" engine (or by a trainer's
`WeightTransferTrainerFactory.trainer_init`), never by `import wsync` or `import wsync.vllm`: this module imports
vLLM and torch at its top.

Worker side, per vLLM worker process (each tensor-parallel rank, each data-parallel replica):
  init_transfer_engine   binds staging tensors laid out as the trainer's manifest to a wsync Worker (staging.py)
  start_weight_update    starts vLLM's layerwise reload, as vLLM's nccl and ipc engines do for checkpoint weights
  receive_weights        waits for the version to be applied into the staging tensors, feeds them to load_weights
  finish_weight_update   finalizes the layerwise reload, then lets wsync write the staging tensors again
  shutdown               the wsync Worker says goodbye
Trainer side: `WsyncTrainerWeightTransferEngine` over a `WeightSource`, publishing through `WsyncSender`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from ..connection import Connection
from .modes import check_pause_mode
from .placement import Placement, placements
from .sender import PUBLISH_TIMEOUT_S, WsyncSender
from .staging import (
    APPLY_TIMEOUT_S,
    REGISTRATION_TIMEOUT_S,
    STAGING_WAIT_S,
    StagingReceiver,
    TensorSpec,
    agent_id_from,
    manifest_from,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed.weight_transfer.base import VLLMWeightSyncClient, WeightSource


@dataclass
class WsyncInitInfo(WeightTransferInitInfo):
    """What every vLLM worker needs to join the bus: the trainer's manifest (three parallel lists, as vLLM's
    nccl and ipc update infos carry theirs) and this side's connection. `sender.init_info_for` builds it."""

    bus: str
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    memory: str | None = None  # "host" (shm) or "device" (nccl, cuda_ipc); default from the model's device
    agent_id: str | None = None  # a template: {host}, {pid}, {rank} (global), {dp} (data-parallel index)
    transport: str | None = None
    curve_keys: str | None = None
    server_key: str | None = None
    registration_timeout: float = REGISTRATION_TIMEOUT_S
    layerwise_reload: bool = True
    staging_wait: float = STAGING_WAIT_S

    def __post_init__(self) -> None:
        self.manifest: list[TensorSpec] = manifest_from(self.names, self.dtype_names, self.shapes)

    @property
    def connection(self) -> Connection:
        """The bus as this worker reaches it (the init info carries its fields as strings)."""
        return Connection(self.bus, self.transport, self.curve_keys, self.server_key)


@dataclass
class WsyncUpdateInfo(WeightTransferUpdateInfo):
    """One update: the wsync version every worker loads (the trainer's committed version)."""

    version: int
    timeout: float = APPLY_TIMEOUT_S

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"version must be a wsync version (an integer >= 1), got {self.version!r}")


def _mtp_check_disabled() -> contextlib.AbstractContextManager[Any]:
    """vLLM's nccl and ipc engines load partial updates with the MTP completeness check off; so do we."""
    try:
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check
    except ImportError:
        return contextlib.nullcontext()
    return disable_mtp_completeness_check()


class WsyncWeightTransferEngine(WeightTransferEngine[WsyncInitInfo, WsyncUpdateInfo]):
    """Backend "wsync" on a vLLM worker: versions arrive over the wsync bus into staging tensors, and each update
    feeds them to the model's `load_weights` (renames, fusions, sharding and quantization stay vLLM's)."""

    init_info_cls = WsyncInitInfo
    update_info_cls = WsyncUpdateInfo
    # The staging tensors are laid out as the target model's checkpoint; a draft model's would differ.
    supports_draft_weight_update = False

    def __init__(
        self,
        config: WeightTransferConfig,
        vllm_config: VllmConfig,
        device: torch.device,
        model: torch.nn.Module,
    ) -> None:
        super().__init__(config, vllm_config, device, model)
        self._receiver: StagingReceiver | None = None
        self._layerwise_reload = True
        self._reloading = False
        self.loaded_version = 0
        self.placements: list[Placement] = []

    @property
    def receiver(self) -> StagingReceiver | None:
        return self._receiver

    def init_transfer_engine(self, init_info: WsyncInitInfo) -> None:
        """Binds staging tensors for `init_info`'s manifest to a new wsync Worker (replacing an earlier one: a
        changed manifest is a new init). A manifest this model cannot load fails first, naming the tensor, and
        leaves the current receiver as it was."""
        with _mtp_check_disabled():
            found = placements(
                self.model, init_info.manifest, tensor_parallel=self.parallel_config.tensor_parallel_size
            )
        self._close_receiver()
        self.placements = found
        template = init_info.agent_id
        agent_id = agent_id_from(
            template,
            rank=torch.distributed.get_rank() if torch.distributed.is_initialized() else 0,
            dp=getattr(self.parallel_config, "data_parallel_index", 0),
        )
        self._layerwise_reload = init_info.layerwise_reload
        self._receiver = StagingReceiver(
            init_info.connection,
            init_info.manifest,
            device=self.device,
            memory=init_info.memory,
            agent_id=agent_id,
            registration_timeout=init_info.registration_timeout,
            staging_wait=init_info.staging_wait,
        )

    def start_weight_update(self) -> None:
        self._require_receiver()
        if self._layerwise_reload:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)
            self._reloading = True

    def receive_weights(self, update_info: WsyncUpdateInfo) -> None:
        receiver = self._require_receiver()
        try:
            with _mtp_check_disabled():
                self.loaded_version = receiver.load_into(
                    self.model, update_info.version, update_info.timeout, keep=True
                )
        except BaseException:
            # vLLM ends the update here without finish_weight_update. The layerwise reload moved every layer's
            # tensors aside when it started; finalizing it puts back those of each layer that loaded nothing, so
            # the engine goes on serving the weights it had (a version that never came loads nothing at all).
            self._end_reload()
            raise

    def finish_weight_update(self) -> None:
        self._end_reload()
        # The version is in vLLM's own weights now: a CPU engine's staging gives its pages back until the next one.
        if self._receiver is not None and self.loaded_version:
            self._receiver.give_back(self.loaded_version)

    def _end_reload(self) -> None:
        try:
            if self._reloading:
                from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

                finalize_layerwise_reload(self.model, self.model_config)
        finally:
            self._reloading = False
            if self._receiver is not None:
                self._receiver.release()

    def shutdown(self) -> None:
        self._close_receiver()

    def _require_receiver(self) -> StagingReceiver:
        if self._receiver is None:
            raise RuntimeError("wsync weight transfer is not initialized: call init_weight_transfer_engine first")
        return self._receiver

    def _close_receiver(self) -> None:
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.close()


@dataclass
class WsyncTrainerInitInfo(TrainerInitInfo):
    """A trainer rank's settings for backend "wsync" (rank, keyword-only, from TrainerInitInfo: 0 publishes).
    `worker_options` go to the workers' init info as they are (agent_id, transport, curve_keys, server_key,
    registration_timeout, layerwise_reload)."""

    backend: ClassVar[str] = "wsync"

    bus: str
    channel: str = "shm"
    agent_id: str | None = None  # default "trainer-<rank>"
    pause_mode: str = "keep"
    cuda_device: int | None = None
    transport: str | None = None
    curve_keys: str | None = None
    server_key: str | None = None
    publish_timeout: float = PUBLISH_TIMEOUT_S
    apply_timeout: float = APPLY_TIMEOUT_S
    worker_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_pause_mode(self.pause_mode)

    @property
    def connection(self) -> Connection:
        """The bus as this trainer rank reaches it."""
        return Connection(self.bus, self.transport, self.curve_keys, self.server_key)

    @property
    def worker_connection(self) -> Connection:
        """The bus as the vLLM workers' hosts reach it (worker_options' transport, curve_keys, server_key)."""
        options = self.worker_options
        return Connection(self.bus, options.get("transport"), options.get("curve_keys"), options.get("server_key"))


# vLLM 0.33's TrainerWeightTransferEngine takes the trainer's rank; 0.32's does not (it keeps only is_sender).
_BASE_TAKES_RANK = "rank" in inspect.signature(TrainerWeightTransferEngine.__init__).parameters


def source_metadata(source: WeightSource) -> list[Any]:
    """The source's ParamMeta list: a method in vLLM 0.32 (`metadata()`), a cached property in 0.33."""
    metadata = source.metadata
    return list(metadata() if callable(metadata) else metadata)


def check_full_source(source: WeightSource) -> None:
    """Raises unless `source` yields every tensor of the model whole on this rank, as a wsync version needs.
    vLLM 0.33 says so with `implements_iter_full()`; in 0.32 iteration materializes every tensor, and a source
    whose `held_names()` is a part of the model (pipeline or expert parallel producers) yields None for the rest."""
    implements_iter_full = getattr(source, "implements_iter_full", None)
    if implements_iter_full is not None:
        if not implements_iter_full():
            raise TypeError(f"wsync publishes full tensors, but {type(source).__name__} does not implement iter_full()")
        return
    held_names = getattr(source, "held_names", None)
    held = held_names() if held_names is not None else None
    if held is not None:
        missing = [m.name for m in source_metadata(source) if m.name not in set(held)]
        if missing:
            raise TypeError(
                f"wsync publishes whole versions from one rank, but {type(source).__name__} holds only part of the "
                f"model here ({len(missing)} tensors missing, the first {missing[0]!r})"
            )


def full_tensors(source: WeightSource) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every tensor of the source: `iter_full()` in vLLM 0.33, iteration in 0.32."""
    iter_full = getattr(source, "iter_full", None)
    return iter_full() if iter_full is not None else iter(source)


_WORKER_OPTIONS = ("agent_id", "transport", "curve_keys", "server_key", "registration_timeout", "layerwise_reload")


class WsyncTrainerWeightTransferEngine(TrainerWeightTransferEngine[WsyncTrainerInitInfo]):
    """Backend "wsync" in the trainer: `send_weights()` publishes the source's full tensors as the next version
    over the bus, then drives vLLM's start / update / finish(weight_version) through the client.

    Every rank iterates the source (FSDP's gathers are collectives); only rank 0 has a wsync Trainer and calls
    the client. The gathered tensors stay alive until the version's outcome is known."""

    init_info_cls = WsyncTrainerInitInfo

    def __init__(
        self,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
        is_sender: bool = True,
        rank: int = 0,
        sender: WsyncSender | None = None,
    ) -> None:
        if _BASE_TAKES_RANK:
            super().__init__(client=client, source=source, is_sender=is_sender, rank=rank)
        else:
            super().__init__(client=client, source=source, is_sender=is_sender)
            self.rank = rank
        self.sender = sender

    @classmethod
    def trainer_init(
        cls,
        init_info: WsyncTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> WsyncTrainerWeightTransferEngine:
        if source is None:
            raise ValueError("wsync weight transfer publishes whole versions: it needs a WeightSource")
        check_full_source(source)
        unknown = set(init_info.worker_options) - set(_WORKER_OPTIONS)
        if unknown:
            raise ValueError(f"unknown worker_options {sorted(unknown)}; known: {list(_WORKER_OPTIONS)}")
        sender = None
        if init_info.is_sender:
            options = init_info.worker_options
            sender = WsyncSender(
                init_info.connection,
                agent_id=init_info.agent_id or f"trainer-{init_info.rank}",
                channel=init_info.channel,
                pause_mode=init_info.pause_mode,
                cuda_device=init_info.cuda_device,
                publish_timeout=init_info.publish_timeout,
                apply_timeout=init_info.apply_timeout,
                worker_agent_id=options.get("agent_id"),
                worker_connection=init_info.worker_connection,
                layerwise_reload=options.get("layerwise_reload"),
            )
            manifest = [
                TensorSpec(m.name, str(m.dtype).removeprefix("torch."), tuple(m.shape)) for m in source_metadata(source)
            ]
            info = sender.init_info(manifest)
            if "registration_timeout" in options:
                info["registration_timeout"] = float(options["registration_timeout"])
            client.init_weight_transfer_engine(info)
        return cls(client=client, source=source, is_sender=init_info.is_sender, rank=init_info.rank, sender=sender)

    def send_weights(self, version: int | None = None) -> None:
        """Publishes the next version (or `version`) and has vLLM load it. Called on every trainer rank."""
        assert self.source is not None
        tensors = [(name, tensor.detach()) for name, tensor in full_tensors(self.source)]
        if self.sender is not None:
            self.sender.sync(self.client, tensors, version)

    def shutdown(self) -> None:
        sender, self.sender = self.sender, None
        if sender is not None:
            sender.close()
