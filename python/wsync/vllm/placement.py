"""Where vLLM's `load_weights` puts each tensor of the trainer's manifest, found before any byte moves.

Each manifest tensor is handed to the model's `load_weights` once, as a meta tensor (no memory, no data), while
every parameter's weight loader is replaced by a recorder. vLLM's own renaming, fusing and sharding code runs as it
would for a checkpoint, and the recorder sees which parameter each tensor reaches and whether it is a shard of it
(the q of a fused qkv, one expert of a stacked tensor). Nothing is copied, and the loaders are put back.

This is how a worker refuses, at init and naming the tensor, a manifest that the model cannot load (a tensor it has
no parameter for, a whole tensor of the wrong shape) instead of failing in the middle of an update; and how it
learns which tensors land whole in one parameter, unchanged (see docs/vllm.md on staging).

Runs on vLLM's worker thread, with torch imported by the caller.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .staging import TensorSpec

_log = logging.getLogger(__name__)
_NO_LOADER = object()


@dataclass(frozen=True)
class Placement:
    """One manifest tensor as vLLM loads it: the parameters its loaders write (by the model's names), and whether
    it lands whole (one parameter, no shard arguments)."""

    name: str
    parameters: tuple[str, ...]
    whole: bool


class ManifestNotLoadable(ValueError):
    """The model cannot load a manifest tensor; the message names it."""


def placements(model: Any, manifest: Sequence[TensorSpec], tensor_parallel: int = 1) -> list[Placement]:
    """Each manifest tensor's Placement. Raises ManifestNotLoadable, naming the tensor, when vLLM's load_weights
    refuses it (no such module or parameter) or a whole tensor's shape differs from its parameter's (checked where
    parameters are not split across `tensor_parallel` ranks)."""
    import torch

    parameters = dict(model.named_parameters(remove_duplicate=False))
    found: list[Placement] = []
    with _recording_loaders(parameters) as calls:
        for spec in manifest:
            calls.clear()
            meta = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device="meta")
            try:
                model.load_weights([(spec.name, meta)])
            except (ValueError, KeyError) as error:
                raise ManifestNotLoadable(
                    f"tensor {spec.name!r} ({spec.dtype}, {list(spec.shape)}): vLLM's {type(model).__name__} does "
                    f"not load it: {error}"
                ) from None
            except Exception as error:  # noqa: BLE001 - a loader that cannot run on meta tensors: not checked
                _log.warning("wsync: could not place tensor %r without loading it (%s)", spec.name, error)
                found.append(Placement(spec.name, (), False))
                continue
            targets = tuple(dict.fromkeys(name for name, _ in calls))
            whole = len(calls) == 1 and not calls[0][1]
            if not targets:
                _log.warning("wsync: vLLM's %s skips tensor %r when loading it", type(model).__name__, spec.name)
            if whole and tensor_parallel == 1:
                _check_whole_shape(model, spec, targets[0], parameters[targets[0]])
            found.append(Placement(spec.name, targets, whole))
    return found


@contextlib.contextmanager
def _recording_loaders(parameters: dict[str, Any]) -> Iterator[list[tuple[str, bool]]]:
    """Every parameter's `weight_loader` replaced by one that records (parameter name, had shard arguments) and
    copies nothing; the originals (or their absence: vLLM then uses default_weight_loader) restored on exit."""
    calls: list[tuple[str, bool]] = []
    saved = {}
    for name, parameter in parameters.items():
        saved[name] = getattr(parameter, "weight_loader", _NO_LOADER)

        def record(*arguments: Any, _name: str = name, **keywords: Any) -> bool | None:
            # (param, loaded_weight) come first, by position or by name (vLLM's fused MoE loader names them);
            # anything else says which part of the parameter the tensor is: a shard id, an expert id.
            shard = arguments[2:] or {k for k in keywords if k not in ("param", "loaded_weight", "return_success")}
            calls.append((_name, bool(shard)))
            # A loader asked for its success (return_success=True) answers True when it took the tensor.
            return True if keywords.get("return_success") else None

        parameter.weight_loader = record
    try:
        yield calls
    finally:
        for name, parameter in parameters.items():
            if saved[name] is _NO_LOADER:
                del parameter.weight_loader
            else:
                parameter.weight_loader = saved[name]


def _check_whole_shape(model: Any, spec: TensorSpec, target: str, parameter: Any) -> None:
    shape = tuple(_declared_shape(model, target, parameter))
    if shape != spec.shape:
        raise ManifestNotLoadable(
            f"tensor {spec.name!r} is {list(spec.shape)}, but vLLM's parameter {target!r} that it loads into is "
            f"{list(shape)}"
        )


def _declared_shape(model: Any, target: str, parameter: Any) -> Sequence[int]:
    """The parameter's shape as the model created it. On the CPU vLLM repacks linear weights after loading and
    leaves an empty parameter behind; the layerwise reload's record keeps the created shape."""
    try:
        from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    except ImportError:
        return parameter.shape
    module_name, _, attribute = target.rpartition(".")
    try:
        module = model.get_submodule(module_name) if module_name else model
    except AttributeError:
        return parameter.shape
    info = LAYERWISE_INFO.get(module)
    created = info.restore_metadata[0].get(attribute) if info is not None and info.restore_metadata else None
    return created.shape if created is not None else parameter.shape
