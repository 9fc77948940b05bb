"""vLLM's pause modes and wsync's: the same three names with the same meaning.

vLLM (`vllm.v1.engine.PauseMode`, taken by `AsyncLLM.pause_generation(mode=...)`) and wsync (`pause_mode=` of
`Trainer.publish`, handed to a worker's pause hook) both say what happens to the requests in flight:

    abort  in-flight requests end now (vLLM returns them with finish reason "abort")
    wait   in-flight requests drain first (vLLM's in-process engine refuses this mode)
    keep   in-flight requests freeze and resume under the new version

So the mapping is the identity on names; what this module adds is refusing anything else before a round starts.
"""

from __future__ import annotations

PAUSE_MODES = ("abort", "wait", "keep")


def check_pause_mode(mode: str) -> str:
    """Returns `mode` when it is one of PAUSE_MODES (valid for vLLM and wsync alike); raises ValueError else."""
    if mode not in PAUSE_MODES:
        raise ValueError(f"pause mode {mode!r} is neither vLLM's nor wsync's: expected one of {PAUSE_MODES}")
    return mode
