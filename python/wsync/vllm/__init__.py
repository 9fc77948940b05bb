"""wsync as a vLLM weight-transfer backend: `WeightTransferConfig(backend="wsync")` (docs/vllm.md).

vLLM calls `register()` in each of its processes through the `vllm.general_plugins` entry point of this package.
Importing `wsync.vllm` imports neither vLLM nor torch: `register()` and the engine module (`wsync.vllm.engine`,
loaded by vLLM's registry when a worker creates the engine) do.

    WsyncSender, LLMClient      the trainer side without vLLM's trainer factory (sender.py)
    StagingReceiver             the worker side without vLLM (staging.py)
    WsyncWeightTransferEngine, WsyncTrainerWeightTransferEngine   vLLM's classes (engine.py, imports vLLM)
"""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

from .modes import PAUSE_MODES, check_pause_mode

BACKEND = "wsync"

_ENGINE_MODULE = "wsync.vllm.engine"
_WORKER_ENGINE = "WsyncWeightTransferEngine"
_TRAINER_ENGINE = "WsyncTrainerWeightTransferEngine"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_registered = False

__all__ = [
    "BACKEND",
    "PAUSE_MODES",
    "LLMClient",
    "StagingReceiver",
    "WsyncSender",
    "WsyncTrainerWeightTransferEngine",
    "WsyncWeightTransferEngine",
    "check_pause_mode",
    "register",
]


def register() -> None:
    """Registers backend "wsync" with vLLM's weight-transfer registries (the worker's, and the trainer's where this
    vLLM has one), through their public `register_engine`, by module path so that nothing heavy is imported until
    an engine is created. Idempotent: vLLM may call it more than once per process, and a forked process inherits
    both this module's state and the registries. Never raises: an exception here would stop vLLM's start-up, so
    a vLLM without a compatible interface gets a warning and no backend."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True  # the outcome below cannot change within a process
        problem = _incompatibility()
        if problem is not None:
            _log.warning("wsync: backend %r not registered: %s", BACKEND, problem)
            return
        from vllm.distributed.weight_transfer import factory

        _register_once(factory.WeightTransferEngineFactory, _WORKER_ENGINE)
        trainer_factory = getattr(factory, "WeightTransferTrainerFactory", None)
        if trainer_factory is not None and _trainer_interface_matches():
            _register_once(trainer_factory, _TRAINER_ENGINE)


def _register_once(registry: Any, class_name: str) -> None:
    try:
        registry.register_engine(BACKEND, _ENGINE_MODULE, class_name)
    except ValueError:
        # register_engine refuses a name it holds: an earlier register() of this process (before a re-import of
        # this module, or in the parent of a fork) put it there.
        _log.debug("wsync: %s already holds backend %r", registry.__name__, BACKEND)


def _incompatibility() -> str | None:
    """Why this process's vLLM cannot take backend "wsync", or None. The interface is checked by shape, not by
    version number: engine.py is written against vLLM 0.32's and 0.33's (docs/vllm.md)."""
    try:
        from vllm.config.weight_transfer import WeightTransferConfig
        from vllm.distributed.weight_transfer import factory  # noqa: F401
        from vllm.distributed.weight_transfer.base import WeightTransferEngine
    except ImportError as error:
        return f"this vLLM has no weight-transfer engine registry ({error})"
    try:
        WeightTransferConfig(backend=BACKEND)
    except Exception as error:  # noqa: BLE001 - pydantic's ValidationError: a vLLM whose backend field lists its own names only
        return f"this vLLM's WeightTransferConfig refuses backend names of plugins ({error})"
    init_params = list(inspect.signature(WeightTransferEngine.__init__).parameters)
    if init_params != ["self", "config", "vllm_config", "device", "model"]:
        return f"WeightTransferEngine.__init__ takes {init_params}, not (config, vllm_config, device, model)"
    receive_params = list(inspect.signature(WeightTransferEngine.receive_weights).parameters)
    if receive_params != ["self", "update_info"]:
        return f"WeightTransferEngine.receive_weights takes {receive_params}, not (update_info)"
    if not hasattr(WeightTransferEngine, "start_weight_update"):
        return "WeightTransferEngine has no start_weight_update/finish_weight_update lifecycle"
    return None


def _trainer_interface_matches() -> bool:
    """Whether this vLLM's trainer side has one of the two shapes engine.py is written for, 0.32's or 0.33's; a
    warning names the difference when not, and the trainer side is not registered (the worker side still is)."""
    problem = _trainer_incompatibility()
    if problem is not None:
        _log.warning("wsync: trainer-side backend %r not registered: %s", BACKEND, problem)
        return False
    return True


def _trainer_incompatibility() -> str | None:
    from vllm.distributed.weight_transfer import base

    engine = getattr(base, "TrainerWeightTransferEngine", None)
    source = getattr(base, "WeightSource", None)
    if engine is None or source is None:
        return "this vLLM has no TrainerWeightTransferEngine or WeightSource"
    params = list(inspect.signature(engine.trainer_init).parameters)
    if params != ["init_info", "client", "source"]:
        return f"trainer_init takes {params}, not (init_info, client, source)"
    init_params = set(inspect.signature(engine.__init__).parameters) - {"self"}
    if init_params not in ({"client", "source", "is_sender"}, {"client", "source", "is_sender", "rank"}):
        return f"TrainerWeightTransferEngine.__init__ takes {sorted(init_params)}, not 0.32's or 0.33's keywords"
    # 0.33: iter_full() yields whole tensors; 0.32: iteration does, and metadata() is a method.
    if not (hasattr(source, "iter_full") or callable(getattr(source, "metadata", None))):
        return "WeightSource has neither iter_full() nor a metadata() method"
    return None


def __getattr__(name: str) -> Any:
    if name in ("WsyncSender", "LLMClient"):
        from . import sender

        return getattr(sender, name)
    if name == "StagingReceiver":
        from .staging import StagingReceiver

        return StagingReceiver
    if name in (_WORKER_ENGINE, _TRAINER_ENGINE):
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
