"""The tensors the Python tests move: a few model shapes in numpy and torch, filled deterministically per version,
so that a test can say which bytes every version must have without asking the process that sent them."""

from __future__ import annotations

import zlib

import numpy as np

# (name, numpy dtype, shape): every dtype numpy has that wsync carries, a scalar and an empty tensor included.
NUMPY_SPEC: list[tuple[str, str, tuple[int, ...]]] = [
    ("embed.weight", "float32", (64, 32)),
    ("layers.0.attn.qkv", "float16", (32, 96)),
    ("layers.0.attn.bias", "float64", (96,)),
    ("layers.0.steps", "int64", (3,)),
    ("layers.0.ids", "int32", (7, 5)),
    ("layers.0.small", "int16", (9,)),
    ("layers.0.tiny", "int8", (11,)),
    ("mask", "bool", (5, 7)),
    ("codes", "uint8", (1000,)),
    ("wide.u16", "uint16", (6,)),
    ("wide.u32", "uint32", (6,)),
    ("wide.u64", "uint64", (6,)),
    ("scale", "float64", ()),
    ("empty", "float32", (0, 4)),
]


def pattern(name: str, version: int, nbytes: int, boolean: bool = False) -> np.ndarray:
    """The bytes of tensor `name` at `version`."""
    rng = np.random.default_rng([zlib.crc32(name.encode()), version])
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    return data & 1 if boolean else data


def numpy_tensors(mismatch: str = "") -> dict[str, np.ndarray]:
    """Zeroed arrays of NUMPY_SPEC; `mismatch` names one bound with another shape."""
    arrays = {}
    for name, dtype, shape in NUMPY_SPEC:
        if name == mismatch:
            shape = tuple(extent + 1 for extent in shape) or (2,)
        arrays[name] = np.zeros(shape, dtype=dtype)
    return arrays


def fill_numpy(arrays: dict[str, np.ndarray], version: int) -> None:
    for name, array in arrays.items():
        array.reshape(-1).view(np.uint8)[:] = pattern(name, version, array.nbytes, array.dtype == np.bool_)


def numpy_bytes(version: int) -> dict[str, bytes]:
    arrays = numpy_tensors()
    fill_numpy(arrays, version)
    return {name: array.tobytes() for name, array in arrays.items()}


# --- frontier-MoE scale (issue 18): 100,000 small tensors ---------------------------------------------------------
MANY_COUNT = 100_000


def many_layout() -> list[tuple[str, int]]:
    """(name, float32 elements) of the MANY_COUNT tensors, in storage order: 4 to 20 elements, named as a MoE's
    experts."""
    return [(f"layers.{index // 1000}.experts.{index % 1000}.w", 4 + index % 17) for index in range(MANY_COUNT)]


def many_tensors(mismatch: str = "") -> dict[str, np.ndarray]:
    """many_layout's tensors as zeroed float32 arrays, views of one buffer (as a trainer's flat parameter storage
    holds them); `mismatch` names one bound with another shape."""
    layout = many_layout()
    storage = np.zeros(sum(size for _, size in layout), dtype=np.float32)
    arrays = {}
    offset = 0
    for name, size in layout:
        view = storage[offset : offset + size]
        arrays[name] = view.reshape(1, size) if name == mismatch else view
        offset += size
    return arrays


def fill_many(arrays: dict[str, np.ndarray], version: int) -> None:
    """Version `version`'s bytes, written once over the buffer all the arrays view."""
    storage = next(iter(arrays.values())).base
    storage.view(np.uint8)[:] = pattern("many", version, storage.nbytes)


def many_torch(device: str):
    """The many_tensors layout as torch float32 tensors on `device`: views of one flat storage, as an FSDP trainer's
    flat parameters or a packed engine's weights hold them."""
    import torch

    names, sizes = zip(*many_layout())
    storage = torch.zeros(sum(sizes), dtype=torch.float32, device=device)
    return dict(zip(names, storage.split(list(sizes))))


def _many_storage(tensors):
    """The one flat tensor that many_torch's tensors view, from offset 0 to the end of the last."""
    first, last = next(iter(tensors.values())), next(reversed(list(tensors.values())))
    return first.as_strided((last.storage_offset() + last.numel(),), (1,), 0)


def fill_many_torch(tensors, version: int) -> None:
    """Version `version`'s bytes (those of fill_many), written once over the storage the tensors view."""
    import torch

    storage = _many_storage(tensors)
    data = pattern("many", version, storage.numel() * storage.element_size())
    storage.view(torch.uint8).copy_(torch.from_numpy(data).to(storage.device))


def many_torch_bytes(tensors) -> dict[str, bytes]:
    """What many_torch's tensors hold, from one copy of their storage to the host (not 100,000 small copies)."""
    host = _many_storage(tensors).cpu().numpy()
    return {
        name: host[tensor.storage_offset() : tensor.storage_offset() + tensor.numel()].tobytes()
        for name, tensor in tensors.items()
    }


def many_bytes(version: int) -> dict[str, bytes]:
    arrays = many_tensors()
    fill_many(arrays, version)
    return {name: array.tobytes() for name, array in arrays.items()}


# --- torch --------------------------------------------------------------------------------------------------------
def torch_model(dtype_name: str = "bfloat16", fp8: bool = False):
    """A small transformer-ish module: bf16 parameters by default, plus fp8 parameters when asked (torch >= 2.1)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Linear(16, 48)
            self.norm = nn.LayerNorm(16)
            self.mlp = nn.Linear(16, 64, bias=False)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.layers = nn.ModuleList([Block(), Block()])
            self.head = nn.Linear(16, 50, bias=False)

    model = Tiny().to(getattr(torch, dtype_name))
    if fp8:
        model.fp8_e4m3 = nn.Parameter(torch.zeros(8, 16).to(torch.float8_e4m3fn), requires_grad=False)
        model.fp8_e5m2 = nn.Parameter(torch.zeros(16).to(torch.float8_e5m2), requires_grad=False)
    model.requires_grad_(False)
    return model


def fill_torch(named, version: int) -> None:
    """Writes version `version`'s bytes into each (name, tensor) in place."""
    import torch

    with torch.no_grad():
        for name, tensor in named:
            flat = tensor.reshape(-1).view(torch.uint8)
            data = pattern(name, version, flat.numel(), tensor.dtype == torch.bool)
            flat.copy_(torch.from_numpy(data).to(flat.device))


def torch_bytes(named) -> dict[str, bytes]:
    import torch

    return {name: tensor.detach().reshape(-1).view(torch.uint8).cpu().numpy().tobytes() for name, tensor in named}
