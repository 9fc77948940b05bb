"""Probes that bench/python/vllm_engine_memory.py runs inside vLLM's worker (LLM.apply_model passes them the model)."""

from __future__ import annotations


def worker_memory(model) -> dict[str, int]:
    """In vLLM's worker (LLM.apply_model): VmRSS and VmHWM (the peak since the last reset), in bytes."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def reset_peak(model) -> None:
    """In vLLM's worker: VmHWM starts again from the current RSS (Linux's clear_refs, value 5)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
