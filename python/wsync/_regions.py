"""Regions (docs/regions.md) on the Python side: a sharded trainer's DTensors as the shards each rank holds, and the
slices a worker binds, as the C library takes them (wsync_region, wsync_bound_region)."""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Iterable, Sequence
from ctypes import c_int64
from typing import Any

from . import _native as N
from ._tensors import TensorInfo, _torch_dtype_map, _unsupported_dtype, describe
from .errors import InvalidArgumentError


class Shards:
    """What one rank of a sharded trainer publishes of a state dict: the manifest (every tensor's name, dtype and
    global shape, in the state dict's order, the same on every rank), the regions it holds (manifest index, offset,
    extent) and one local tensor per region, and its rank among the trainer's ranks."""

    def __init__(
        self,
        manifest: list[TensorInfo],
        regions: list[tuple[int, tuple[int, ...], tuple[int, ...]]],
        local: list[TensorInfo],
        rank: int,
        count: int,
    ):
        self.manifest, self.regions, self.local, self.rank, self.count = manifest, regions, local, rank, count

    def manifest_key(self) -> tuple:
        return tuple((info.name, info.dtype, info.shape) for info in self.manifest)

    def holdings_key(self) -> tuple:
        return (self.rank, self.count, tuple(self.regions))


def _dtensor_class():
    # Whoever made a DTensor imported its module: looked up, never imported here (importing it costs a publish of
    # plain tensors a tenth of a second, and torch before 2.4 has none).
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def split(pairs: list[tuple[str, Any]], rank: int | None, count: int | None) -> Shards | None:
    """The shards of `pairs` when any of them is a torch DTensor (FSDP2's parameters, TP's), else None. Each DTensor
    gives its local shard's region (torch's own placement arithmetic: compute_local_shape_and_global_offset), a plain
    tensor a whole one (every rank holds it: a replica). `rank`/`count` default to torch.distributed's."""
    dtensor = _dtensor_class()
    if dtensor is None or not any(isinstance(tensor, dtensor) for _, tensor in pairs):
        return None
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if rank is None or count is None:
        if not dist.is_initialized():
            raise InvalidArgumentError(
                "DTensors published without torch.distributed initialised: pass source_rank and source_count"
            )
        rank = dist.get_rank() if rank is None else rank
        count = dist.get_world_size() if count is None else count
    manifest, regions, local = [], [], []
    for index, (name, tensor) in enumerate(pairs):
        if isinstance(tensor, dtensor):
            if any(isinstance(placement, Partial) for placement in tensor.placements):
                raise InvalidArgumentError(
                    f"tensor '{name}' is Partial (a reduction still pending): publish it once reduced"
                )
            shard = tensor.to_local()
            shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
            dtype = _torch_dtype_map(torch).get(tensor.dtype)
            if dtype is None:
                raise _unsupported_dtype(name, str(tensor.dtype).replace("torch.", ""))
            global_shape = tuple(tensor.shape)
            nbytes = math.prod(global_shape) * tensor.element_size()
        else:
            shard = tensor
            info = describe(name, tensor)
            dtype, global_shape, nbytes = info.dtype, info.shape, info.nbytes
            shape, offset = global_shape, (0,) * len(global_shape)
        shape, offset = tuple(int(d) for d in shape), tuple(int(o) for o in offset)
        if isinstance(shard, torch.Tensor) and not shard.is_contiguous():
            shard = shard.contiguous()  # a copy, kept alive by its TensorInfo until the outcome
        local_info = describe(name, shard)
        # A manifest entry's data and bytes are not read (wsync_trainer_declare_manifest); its device is kept for the
        # trainer's CUDA stream rule.
        manifest.append(TensorInfo(name, dtype, global_shape, 0, nbytes, local_info.device, None, None))
        if len(shape) > 0 and math.prod(shape) == 0:
            continue  # an empty shard (FSDP2's last ranks of a short dim 0) holds nothing
        local.append(local_info)
        regions.append((index, offset, shape))
    return Shards(manifest, regions, local, int(rank), int(count))


class RegionArray:
    """A wsync_region[] for wsync_trainer_declare_holdings, and the arrays its pointers lead to."""

    def __init__(self, regions: Sequence[tuple[int, tuple[int, ...], tuple[int, ...]]]):
        self.count = len(regions)
        self.array = (N.RegionStruct * max(self.count, 1))()
        self._keep = []
        for entry, (tensor, offset, extent) in zip(self.array, regions):
            offsets, extents = (c_int64 * len(offset))(*offset), (c_int64 * len(extent))(*extent)
            self._keep += [offsets, extents]
            entry.tensor, entry.ndim = tensor, len(offset)
            entry.offset = ctypes.cast(offsets, ctypes.POINTER(c_int64))
            entry.extent = ctypes.cast(extents, ctypes.POINTER(c_int64))


def _bounds(spec: Any, shape: Sequence[int] | None, what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(offset, extent) of a region written as Python slices or (start, stop) pairs, one a dimension. Against `shape`
    (a local tensor's) a slice may leave its bounds out; against a checkpoint tensor, whose shape the worker learns
    only from the trainer's manifest, every bound must be given."""
    if not isinstance(spec, (tuple, list)):
        spec = (spec,)
    if shape is not None and len(spec) != len(shape):
        raise InvalidArgumentError(f"{what}: {len(spec)} dimensions for a tensor of shape {list(shape)}")
    offset, extent = [], []
    for dim, part in enumerate(spec):
        if isinstance(part, slice):
            if part.step not in (None, 1):
                raise InvalidArgumentError(f"{what}: dimension {dim} has step {part.step}; regions are boxes")
            size = shape[dim] if shape is not None else None
            start, stop = part.start, part.stop
            if size is not None:
                start, stop, _ = part.indices(size)
            if start is None or stop is None:
                raise InvalidArgumentError(
                    f"{what}: dimension {dim} needs both bounds ({part}): the checkpoint tensor's shape comes from "
                    f"the trainer"
                )
        elif isinstance(part, (tuple, list)) and len(part) == 2:
            start, stop = part
        else:
            raise InvalidArgumentError(f"{what}: dimension {dim} is {part!r}, not a slice or a (start, stop) pair")
        if not (isinstance(start, int) and isinstance(stop, int)) or start < 0 or stop < start:
            raise InvalidArgumentError(f"{what}: dimension {dim} is [{start}:{stop}]")
        offset.append(start)
        extent.append(stop - start)
    return tuple(offset), tuple(extent)


class BoundRegionArray:
    """A wsync_bound_region[] for wsync_worker_config.regions: each slice a worker binds, as (checkpoint tensor,
    region, local tensor[, place]); the place defaults to the whole local tensor."""

    def __init__(self, slices: Iterable[Sequence[Any]], infos: list[TensorInfo]):
        index = {info.name: position for position, info in enumerate(infos)}
        entries = list(slices)
        self.count = len(entries)
        self.array = (N.BoundRegionStruct * max(self.count, 1))()
        self._keep: list[Any] = []
        for position, (entry, item) in enumerate(zip(self.array, entries)):
            if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
                raise InvalidArgumentError(
                    f"slice {position} is {item!r}: give (checkpoint tensor, region, local tensor[, place])"
                )
            tensor, region, into = item[0], item[1], item[2]
            if into not in index:
                raise InvalidArgumentError(f"slice {position} of '{tensor}' goes into '{into}', which is not bound")
            local = infos[index[into]]
            offset, extent = _bounds(region, None, f"slice {position} of '{tensor}'")
            place = item[3] if len(item) == 4 else tuple(slice(None) for _ in local.shape)
            local_offset, local_extent = _bounds(place, local.shape, f"slice {position} into '{into}'")
            arrays = [
                (c_int64 * max(len(values), 1))(*values) for values in (offset, extent, local_offset, local_extent)
            ]
            name = str(tensor).encode()
            self._keep += [name, *arrays]
            entry.tensor, entry.ndim, entry.local = name, len(offset), index[into]
            entry.offset, entry.extent, entry.local_offset, entry.local_extent = (
                ctypes.cast(array, ctypes.POINTER(c_int64)) for array in arrays
            )

    def pointer(self):
        return self.array if self.count else None
