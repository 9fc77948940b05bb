"""A Python inference worker for the tests: binds a model's tensors (numpy or torch), reports every callback as a
JSON line on stdout, dumps the bytes it serves after every resume, and can be told to misbehave."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models

import wsync


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bus", required=True)
    parser.add_argument("--id", default="worker-0")
    parser.add_argument("--kind", choices=["numpy", "many", "torch", "torch-fp8"], default="numpy")
    parser.add_argument("--dump-dir", help="after every resume: DIR/<resume count>.pkl with {version, bytes}")
    parser.add_argument("--until-version", type=int, default=0, help="exit 0 once this version is applied")
    parser.add_argument("--fail-pause", type=int, default=0, help="the Nth pause raises")
    parser.add_argument("--hang-pause", type=int, default=0, help="the Nth pause never returns")
    parser.add_argument("--mismatch", default="", help="bind this tensor with another shape")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--device", default="cpu", help="torch kinds and many: where the model lives (cuda:N: device memory)"
    )
    args = parser.parse_args()

    if args.kind == "numpy":
        tensors = models.numpy_tensors(args.mismatch)
        models.fill_numpy(tensors, 0)  # version 0's bytes: what the engine serves before any update
        named = list(tensors.items())
    elif args.kind == "many" and args.device == "cpu":
        tensors = models.many_tensors(args.mismatch)
        models.fill_many(tensors, 0)
        named = list(tensors.items())
    elif args.kind == "many":
        import torch

        tensors = models.many_torch(args.device)
        models.fill_many_torch(tensors, 0)
        torch.cuda.synchronize()
        named = list(tensors.items())
    else:
        import torch

        model = models.torch_model(fp8=args.kind == "torch-fp8").to(args.device)
        models.fill_torch(model.named_parameters(), 0)
        if args.device != "cpu":
            torch.cuda.synchronize()
        named = list(model.named_parameters())
        tensors = model.named_parameters()  # the generator itself, as an engine would pass it

    pauses = 0
    resumes = 0
    lock = threading.Lock()

    def dump(version: int) -> None:
        nonlocal resumes
        with lock:
            resumes += 1
            count = resumes
        if args.dump_dir:
            if args.kind == "numpy" or (args.kind == "many" and args.device == "cpu"):
                data = {name: array.tobytes() for name, array in named}
            elif args.kind == "many":
                data = models.many_torch_bytes(tensors)
            else:
                data = models.torch_bytes(named)
            path = os.path.join(args.dump_dir, f"{args.id}-{count:04d}.pkl")
            with open(path + ".tmp", "wb") as out:
                pickle.dump({"version": version, "bytes": data}, out)
            os.replace(path + ".tmp", path)

    def on_pause(mode: str, round_: int) -> None:
        nonlocal pauses
        pauses += 1
        emit("pause", mode=mode, round=round_, count=pauses)
        if pauses == args.fail_pause:
            raise RuntimeError(f"engine refuses pause {pauses} (test)")
        if pauses == args.hang_pause:
            emit("hanging", round=round_)
            while True:
                time.sleep(1)

    resumed = {}

    def on_resume(version: int) -> None:
        emit("resume", version=version)
        dump(version)
        resumed.setdefault(version, threading.Event()).set()

    def on_applied(version: int, round_: int) -> None:
        emit("applied", version=version, round=round_)

    stdin_closed = threading.Event()
    worker_box = {}

    def read_commands() -> None:  # "dump": the bytes the engine serves now, tagged with its applied version
        for line in sys.stdin:
            if line.strip() == "dump" and "worker" in worker_box:
                version = worker_box["worker"].applied_version
                dump(version)
                emit("dumped", version=version)
        stdin_closed.set()

    threading.Thread(target=read_commands, daemon=True).start()
    worker = wsync.Worker(
        args.bus,
        agent_id=args.id,
        tensors=tensors,
        on_pause=on_pause,
        on_resume=on_resume,
        on_applied=on_applied,
        registration_timeout=args.timeout,
    )
    worker_box["worker"] = worker
    emit("ready", rank=worker.rank, applied=worker.applied_version, pid=os.getpid())
    if args.until_version:
        version = worker.wait_for_version(args.until_version, timeout=args.timeout)
        dump(version)  # what the engine holds now: the last dump
        # The round's resume (after which its counters are settled), unless the worker stops first.
        resumed.setdefault(version, threading.Event()).wait(10)
        counters = worker.counters
        worker.close()
        emit("done", version=version, counters=counters.__dict__, callback_errors=worker.callback_errors)
        return 0
    stdin_closed.wait()  # serves until the test closes stdin
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
