"""A Python trainer for the tests: publishes versions of a model (numpy arrays or a torch model's parameters) and
reports each outcome as a JSON line on stdout."""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models

import wsync


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bus", required=True)
    parser.add_argument("--id", default="trainer-0")
    parser.add_argument("--kind", choices=["numpy", "torch"], default="numpy")
    parser.add_argument("--versions", default="1,2,3")
    parser.add_argument("--pause-mode", default="keep")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    if args.kind == "numpy":
        arrays = models.numpy_tensors()
        named = list(arrays.items())
    else:
        model = models.torch_model()
        named = list(model.named_parameters())
    failures = 0
    with wsync.Trainer(args.bus, agent_id=args.id) as trainer:
        emit("ready", rank=trainer.rank, committed=trainer.committed_version)
        for index, version in enumerate(int(text) for text in args.versions.split(",")):
            if args.kind == "numpy":
                models.fill_numpy(arrays, version)
            else:
                models.fill_torch(named, version)
            # The first publish declares the manifest; the later ones take the fast path (same memory).
            tensors = (arrays if args.kind == "numpy" else model.named_parameters()) if index == 0 else None
            handle = trainer.publish(version, tensors, label=f"step-{version}", pause_mode=args.pause_mode)
            try:
                outcome = handle.wait(timeout=args.timeout)
            except (wsync.AbortedError, wsync.RefusedError) as error:
                failures += 1
                outcome = error.outcome
            emit(
                "outcome",
                version=version,
                kind=outcome.kind,
                reason=outcome.reason,
                refusal=outcome.refusal,
                detail=outcome.detail,
                bytes=outcome.bytes,
                round=outcome.round,
            )
    return 4 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
