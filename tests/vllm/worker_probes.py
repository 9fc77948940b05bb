"""What the vLLM stage's tests read inside vLLM's worker (LLM.apply_model passes a model, collective_rpc a worker),
and the same digests of a trainer's own model. Functions of an importable module: vLLM pickles them by name."""

from __future__ import annotations

import hashlib

import torch


def parameter_digests(model: torch.nn.Module) -> dict[str, str]:
    """SHA-256 of the bytes of each parameter a model keeps, by name. On the CPU vLLM repacks each linear layer's
    weight for its GEMM and leaves an empty parameter behind: those are left out."""
    return {
        name: hashlib.sha256(parameter.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        for name, parameter in model.named_parameters()
        if parameter.numel() > 0
    }


def engine_placements(worker) -> dict[str, list]:
    """The wsync engine's placement of each manifest tensor, as [parameters, whole] (lists: what comes back through
    vLLM's RPC)."""
    return {p.name: [list(p.parameters), p.whole] for p in worker.weight_transfer_engine.placements}
