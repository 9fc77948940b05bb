#!/usr/bin/env python3
"""A Python trainer (wsync.Trainer) publishing a catalog model's tensors from torch tensors, side by side in the
same run with the C++ agent path (the wsync-trainer program, same manifest, channel and receivers) and with what
RL frameworks do in torch.

    python bench/python/publish.py --channel cuda_ipc --models qwen2.5-7b qwen3-30b-a3b \\
        --out publish.md --json publish.json                          # 1 GPU: trainer and receiver on cuda:0
    python bench/python/publish.py --channel nccl ...            # 2 GPUs: trainer on cuda:0, receiver cuda:1
    python bench/python/publish.py --quick --channel shm         # CPU tensors, small shapes: seconds
    python bench/python/publish.py --channel cuda_ipc --same-process ...  # the worker in the trainer's process
    python bench/python/publish.py --channel cuda_ipc --step-kernel ...   # the trainer's GPU busy just before

The manifest comes from the C++ model catalog (`wsync-trainer --print-manifest --model M`), never a copy of it.
Rows, per model:
  wsync Python   wsync.Trainer.publish(version) (the fast path after the first) and PublishHandle.wait, timed
                 from before publish to after wait (wall) and the outcome's own total (publish to outcome, measured
                 by the agent);
  wsync C++      wsync-trainer --no-perturb (the C++ TrainerAgent, model in one cudaMalloc block), its logged
                 per-version total (the same measure as the outcome's total above);
  torch          1 GPU / CPU: per-tensor `dst.copy_(src)` and one copy of the whole model packed into one buffer;
                 nccl (or gloo on the CPU): per-tensor torch.distributed.broadcast, and vLLM-style packed
                 broadcast through two 1 GiB buckets, double-buffered (pack with torch copies, broadcast, unpack).
The receiver is the same process for both wsync rows: one Python wsync.Worker (this file, --role receiver) bound
to torch tensors on the receiver device. Bytes are verified: after the timed Python rounds the trainer's tensors
are rewritten and published once more, and a checksum of the receiver's tensors must equal the trainer's; the
torch rows' destinations are checksummed the same way.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

THIS = Path(__file__).resolve()
DTYPES = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
GiB = 1 << 30
CHECKSUM_CHUNK = 256 << 20


# ---- helpers shared by every role ---------------------------------------------------------------------------------


def same_nccl_env():
    """The environment for wsync-trainer, with this process's NCCL first on its library path. NCCL refuses ranks of
    different versions ("Mismatched NCCL version"), and wsync loads whichever libnccl.so.2 the dynamic linker finds:
    in a torch process that is torch's own (already loaded), in the C++ program the system's, unless told."""
    env = dict(os.environ)
    try:
        with open("/proc/self/maps") as maps:
            loaded = [line.split()[-1] for line in maps if "libnccl.so" in line]
    except OSError:
        loaded = []
    if loaded:
        folder = os.path.dirname(loaded[0])
        env["LD_LIBRARY_PATH"] = folder + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def trainer_program() -> str:
    """wsync-trainer: $WSYNC_TRAINER, else beside $WSYNC_BIN_DIR (an install's bin/, or a build tree's
    tools/coordinator/ whose sibling is tools/trainer/), else PATH."""
    candidates = [os.environ.get("WSYNC_TRAINER", "")]
    bin_dir = os.environ.get("WSYNC_BIN_DIR")
    if bin_dir:
        candidates += [
            os.path.join(bin_dir, "wsync-trainer"),
            os.path.join(bin_dir, "..", "trainer", "wsync-trainer"),
        ]
    candidates.append(shutil.which("wsync-trainer") or "")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise SystemExit("wsync-trainer not found: set WSYNC_TRAINER or WSYNC_BIN_DIR")


HF_PREFIX = "hf:"
HF_DTYPES = {"fp32": ("float32", "F32"), "bf16": ("bfloat16", "BF16")}


def catalog_manifest(model: str) -> list:
    """The model's tensors: the C++ catalog's (wsync-trainer --print-manifest), or for "hf:NAME[:bf16]" the
    named parameters of examples/rl/policy_models.py's transformers model NAME (built on the meta device: no memory),
    in fp32 as the RL examples run it unless :bf16 says otherwise."""
    if model.startswith(HF_PREFIX):
        return hf_manifest(model[len(HF_PREFIX) :])
    out = subprocess.run(
        [trainer_program(), "--print-manifest", "--model", model], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def hf_manifest(name: str) -> list:
    import torch
    import transformers

    name, _, precision = name.partition(":")
    dtype, code = HF_DTYPES.get(precision or "fp32", (None, None))
    if dtype is None:
        raise SystemExit(f"hf:{name}:{precision}: precision is one of {', '.join(HF_DTYPES)}")
    sys.path.insert(0, str(THIS.parents[2] / "examples" / "rl"))
    import policy_models

    meta = torch.device("meta")
    build = lambda: transformers.AutoModelForCausalLM.from_config(policy_models.config_for(name))  # noqa: E731
    if hasattr(meta, "__enter__"):  # torch >= 2.0: shapes without memory
        with meta:
            model = build()
    else:
        model = build()
    model = model.to(getattr(torch, dtype))
    return [
        {"name": tensor_name, "dtype": code, "shape": list(tensor.shape)}
        for tensor_name, tensor in model.named_parameters()
    ]


def make_tensors(torch, specs, device, zero=False):
    make = torch.zeros if zero else torch.empty
    return [make(spec["shape"], dtype=getattr(torch, DTYPES[spec["dtype"]]), device=device) for spec in specs]


def byte_view(torch, tensor):
    return tensor.reshape(-1).view(torch.uint8)


def randomize(torch, tensors):
    for tensor in tensors:
        if tensor.numel():
            byte_view(torch, tensor).random_(0, 256)


def step_kernel(torch, args, tensors, device):
    """--step-kernel: what an optimizer step leaves before a publish, GPU work of the trainer's just done (a kernel
    over its largest tensor, which it rewrites with the same bytes), so that the round starts with the trainer's
    context the GPU's last. Untimed; the timed rounds start after it finished."""
    if not args.step_kernel or device == "cpu":
        return
    largest = max(tensors, key=lambda tensor: tensor.numel())
    view = byte_view(torch, largest)
    view.copy_(view.clone())
    synchronize(torch, device)


def checksum(torch, tensors) -> str:
    """Per tensor, the sum of its 32-bit words (bytes where the size is not a multiple of 4), in chunks; the list
    hashed. Catches tensors not written, written stale or with other bytes."""
    sums = []
    for tensor in tensors:
        flat = byte_view(torch, tensor) if tensor.numel() else None
        if flat is None:
            sums.append(0)
            continue
        words = flat.view(torch.int32) if flat.numel() % 4 == 0 else flat
        total = 0
        for start in range(0, words.numel(), CHECKSUM_CHUNK):
            total += int(words[start : start + CHECKSUM_CHUNK].sum(dtype=torch.int64))
        sums.append(total)
    return hashlib.sha256(json.dumps(sums).encode()).hexdigest()[:16]


def synchronize(torch, device):
    if device != "cpu":
        torch.cuda.synchronize(device)


def summary(samples_ms):
    if not samples_ms:
        return None
    return {
        "median_ms": statistics.median(samples_ms),
        "min_ms": min(samples_ms),
        "max_ms": max(samples_ms),
        "samples_ms": samples_ms,
    }


# ---- the receiver: one wsync.Worker bound to torch tensors -------------------------------------------------------


def receiver_main(args):
    import torch

    import wsync

    specs = json.loads(Path(args.manifest).read_text())
    device = args.device
    tensors = make_tensors(torch, specs, device, zero=True)
    worker = wsync.Worker(
        args.bus,
        agent_id="receiver-0",
        tensors=[(spec["name"], tensor) for spec, tensor in zip(specs, tensors)],
        cuda_device=None if device == "cpu" else torch.device(device).index,
    )
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "checksum":  # checksum VERSION: once VERSION is applied (a Commit lands after the outcome)
            try:
                worker.wait_for_version(int(command[1]), timeout=60)
            except wsync.TimeoutError:
                pass
            synchronize(torch, device)
            print(json.dumps({"version": worker.applied_version, "checksum": checksum(torch, tensors)}), flush=True)
        elif command[0] == "quit":
            break
    worker.close()


class LocalReceiver:
    """The receiver in this process (--same-process): a trainer and its engine in one process, as verl's hybrid
    engine runs them. Over cuda_ipc the worker then copies from the trainer's own addresses (CUDA opens no IPC handle
    in the process that made it), with no switch between two processes' GPU contexts."""

    def __init__(self, bus, specs, device):
        import torch

        import wsync

        self._torch, self._wsync, self._device = torch, wsync, device
        self._tensors = make_tensors(torch, specs, device, zero=True)
        self._worker = wsync.Worker(
            bus,
            agent_id="receiver-0",
            tensors=[(spec["name"], tensor) for spec, tensor in zip(specs, self._tensors)],
            cuda_device=None if device == "cpu" else torch.device(device).index,
        )

    def checksum(self, version):
        try:
            self._worker.wait_for_version(version, timeout=60)
        except self._wsync.TimeoutError:
            pass
        synchronize(self._torch, self._device)
        return {"version": self._worker.applied_version, "checksum": checksum(self._torch, self._tensors)}

    def close(self):
        self._worker.close()
        del self._tensors


class Receiver:
    def __init__(self, bus, manifest_path, device):
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(THIS),
                "--role",
                "receiver",
                "--bus",
                bus,
                "--manifest",
                str(manifest_path),
                "--device",
                device,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"receiver did not start (said {line!r}, exit {self.process.poll()})")

    def checksum(self, version):
        self.process.stdin.write(f"checksum {version}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()


# ---- torch.distributed baselines: per-tensor broadcast and vLLM-style packed, double-buffered ---------------------


def pieces(tensors_bytes, bucket):
    """The flat byte stream of all tensors cut into buckets: per bucket, [(tensor index, start, end)]."""
    buckets, current, used = [], [], 0
    for index, size in enumerate(tensors_bytes):
        offset = 0
        while offset < size:
            take = min(size - offset, bucket - used)
            current.append((index, offset, offset + take))
            offset += take
            used += take
            if used == bucket:
                buckets.append(current)
                current, used = [], 0
    if current:
        buckets.append(current)
    return buckets


def dist_rounds(torch, dist, tensors, rank, device, mode, rounds, bucket_bytes):
    """Per round, rank 0 sends `tensors`, rank 1 receives into them. Returns the wall times in ms."""
    flats = [byte_view(torch, tensor) if tensor.numel() else None for tensor in tensors]
    plan = pieces([tensor.numel() * tensor.element_size() for tensor in tensors], bucket_bytes)
    buffers = []
    if mode == "packed":
        size = max(sum(end - start for _, start, end in bucket) for bucket in plan) if plan else 0
        buffers = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(2)]
    times = []
    for _ in range(rounds):
        dist.barrier()
        synchronize(torch, device)
        start = time.perf_counter()
        if mode == "per-tensor":
            for flat in flats:  # bytes: gloo has no bfloat16; nccl moves the same bytes either way
                if flat is not None:
                    dist.broadcast(flat, src=0)
        else:
            pending = [None, None]  # the last broadcast through each buffer
            for number, bucket in enumerate(plan):
                slot = number % 2
                buffer = buffers[slot]
                if pending[slot] is not None:
                    pending[slot].wait()  # the buffer's previous broadcast (and on rank 1 its unpack) is done
                    if rank == 1:
                        unpack(flats, plan[number - 2], buffer)
                at = 0
                if rank == 0:
                    for index, lo, hi in bucket:
                        buffer[at : at + hi - lo].copy_(flats[index][lo:hi])
                        at += hi - lo
                used = sum(hi - lo for _, lo, hi in bucket)
                pending[slot] = dist.broadcast(buffer[:used], src=0, async_op=True)
            for number in range(max(0, len(plan) - 2), len(plan)):
                pending[number % 2].wait()
                if rank == 1:
                    unpack(flats, plan[number], buffers[number % 2])
        synchronize(torch, device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def unpack(flats, bucket, buffer):
    at = 0
    for index, lo, hi in bucket:
        flats[index][lo:hi].copy_(buffer[at : at + hi - lo])
        at += hi - lo


def dist_main(args):
    """Rank 1 of the torch.distributed baselines (rank 0 is the benchmark process)."""
    import torch
    import torch.distributed as dist

    specs = json.loads(Path(args.manifest).read_text())
    device = args.device
    if device != "cpu":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, init_method=args.init, rank=1, world_size=2)
    tensors = make_tensors(torch, specs, device, zero=True)
    for mode in ("per-tensor", "packed"):
        dist_rounds(torch, dist, tensors, 1, device, mode, args.warmup + args.reps, args.bucket_mib << 20)
        synchronize(torch, device)
        result = checksum(torch, tensors)
        dist.barrier()
        sums = [None, None]
        dist.all_gather_object(sums, result)
        for tensor in tensors:
            tensor.zero_()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dist_baselines(torch, args, manifest_path, tensors, expected, trainer_device, receiver_device, backend):
    import torch.distributed as dist

    init = f"tcp://127.0.0.1:{free_port()}"
    peer = subprocess.Popen(
        [
            sys.executable,
            str(THIS),
            "--role",
            "dist",
            "--manifest",
            str(manifest_path),
            "--device",
            receiver_device,
            "--backend",
            backend,
            "--init",
            init,
            "--warmup",
            str(args.warmup),
            "--reps",
            str(args.reps),
            "--bucket-mib",
            str(args.bucket_mib),
        ]
    )
    rows = []
    try:
        dist.init_process_group(backend, init_method=init, rank=0, world_size=2)
        for mode, label in (
            ("per-tensor", f"torch.distributed.broadcast per tensor ({backend})"),
            ("packed", f"packed broadcast, 2 x {args.bucket_mib} MiB buckets, double-buffered ({backend}, vLLM-style)"),
        ):
            times = dist_rounds(
                torch, dist, tensors, 0, trainer_device, mode, args.warmup + args.reps, args.bucket_mib << 20
            )
            dist.barrier()
            sums = [None, None]
            dist.all_gather_object(sums, None)
            rows.append(
                {
                    "path": label,
                    "kind": "torch",
                    "measure": "wall",
                    **summary(times[args.warmup :]),
                    "verified": sums[1] == expected,
                    "checksum": sums[1],
                }
            )
        dist.destroy_process_group()
    finally:
        peer.wait(timeout=120)
    return rows


# ---- the wsync rows -----------------------------------------------------------------------------------------------

CPP_LINE = re.compile(
    r"version (\d+) committed in round \d+: [\d.]+ MB in ([\d.]+) ms \(until plan ([\d.]+) ms, "
    r"sending ([\d.]+) ms"
)


class _NoCppRow(Exception):
    """The model has no C++ catalog entry: the wsync C++ row is left out."""


def bench_model(torch, wsync, args, model, workdir):
    specs = catalog_manifest(model)
    total = 0
    for spec in specs:
        count = 1
        for dim in spec["shape"]:
            count *= dim
        total += count * torch.tensor([], dtype=getattr(torch, DTYPES[spec["dtype"]])).element_size()
    entry = {"model": model, "tensors": len(specs), "bytes": total, "rows": [], "skipped": []}
    trainer_device = "cpu" if args.channel == "shm" else f"cuda:{args.trainer_device}"
    receiver_device = "cpu" if args.channel == "shm" else f"cuda:{args.receiver_device}"
    if args.channel != "shm":
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(args.trainer_device)
        same = args.trainer_device == args.receiver_device
        need = total * (2 if same else 1) + 2 * GiB
        if need > free:
            entry["skipped"].append(
                f"{model}: trainer and receiver copies need {need / GiB:.1f} GiB on cuda:{args.trainer_device}, "
                f"{free / GiB:.1f} GiB free"
            )
            return entry
    manifest_path = workdir / f"{re.sub(r'[^A-Za-z0-9.]+', '_', model)}.json"
    manifest_path.write_text(json.dumps(specs))
    bus = f"pybench-{os.getpid()}-{re.sub(r'[^A-Za-z0-9]+', '', model)}"
    rounds = args.warmup + args.reps
    timeout = 600

    tensors = make_tensors(torch, specs, trainer_device)
    randomize(torch, tensors)
    synchronize(torch, trainer_device)
    named = [(spec["name"], tensor) for spec, tensor in zip(specs, tensors)]
    with wsync.Coordinator(bus, log_level="warn") as _:
        receiver = (
            LocalReceiver(bus, specs, receiver_device)
            if args.same_process
            else Receiver(bus, manifest_path, receiver_device)
        )
        try:
            # wsync, Python
            walls, totals, sendings = [], [], []
            with wsync.Trainer(
                bus,
                agent_id="py-trainer",
                channel=args.channel,
                cuda_device=None if args.channel == "shm" else args.trainer_device,
            ) as trainer:
                version = trainer.committed_version + 1
                for number in range(rounds):
                    step_kernel(torch, args, tensors, trainer_device)
                    start = time.perf_counter()
                    handle = trainer.publish(version, named if number == 0 else None, pause_mode="keep")
                    outcome = handle.wait(timeout=timeout)
                    wall = (time.perf_counter() - start) * 1e3
                    if number >= args.warmup:
                        walls.append(wall)
                        totals.append(outcome.total * 1e3)
                        sendings.append(outcome.sending * 1e3)
                    version += 1
                randomize(torch, tensors)  # new bytes, published once more (untimed), then compared
                synchronize(torch, trainer_device)
                trainer.publish(version, named, pause_mode="keep").wait(timeout=timeout)
                expected = checksum(torch, tensors)
                got = receiver.checksum(version)
                verified = got["version"] == version and got["checksum"] == expected
                last = version
            where = ", the worker in this process" if args.same_process else ""
            entry["rows"].append(
                {
                    "path": f"wsync Python (wsync.Trainer, torch tensors{where})",
                    "kind": "wsync-python",
                    "measure": "wall: publish() to wait() returned",
                    **summary(walls),
                    "outcome_total": summary(totals),
                    "outcome_sending": summary(sendings),
                    "verified": verified,
                    "checksum": got["checksum"],
                    "expected": expected,
                }
            )
            if model.startswith(HF_PREFIX):
                entry["skipped"].append(f"wsync C++ row: {model} is not in the C++ model catalog")
                raise _NoCppRow
            if args.same_process:
                entry["skipped"].append("wsync C++ row: wsync-trainer is a process of its own (--same-process)")
                raise _NoCppRow
            # wsync, C++ (same coordinator, manifest, channel and receiver). Our tensors get new bytes first, never
            # published: a receiver that ends with them read this process's memory during the C++ trainer's rounds.
            randomize(torch, tensors)
            synchronize(torch, trainer_device)
            unpublished = checksum(torch, tensors)
            command = [
                trainer_program(),
                "--bus",
                bus,
                "--id",
                "cpp-trainer",
                "--model",
                model,
                "--channel",
                args.channel,
                "--steps",
                str(rounds),
                "--no-perturb",
                "--pause-mode",
                "keep",
                "--log-level",
                "info",
            ]  # its per-version lines are at info
            if args.channel != "shm":
                command += ["--cuda-device", str(args.trainer_device)]
            ran = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=same_nccl_env())
            matches = [CPP_LINE.search(line) for line in (ran.stdout + ran.stderr).splitlines()]
            matches = [match for match in matches if match]
            cpp = [float(match.group(2)) for match in matches][args.warmup :]
            got_cpp = receiver.checksum(last + rounds)
            got_cpp["holds"] = (
                "the Python trainer's last published bytes"
                if got_cpp["checksum"] == expected
                else "the Python trainer's unpublished bytes"
                if got_cpp["checksum"] == unpublished
                else "other bytes (the C++ trainer's)"
            )
            cpp_row = {
                "path": "wsync C++ (wsync-trainer: TrainerAgent"
                + (", model in one cudaMalloc block)" if args.channel != "shm" else ")"),
                "kind": "wsync-cpp",
                "measure": "outcome total (agent: publish to outcome)",
                **(summary(cpp) or {}),
                "outcome_sending": summary([float(match.group(4)) for match in matches][args.warmup :]),
                "exit": ran.returncode,
                "committed": len(matches),
                "receiver": got_cpp,
                # the C++ trainer's bytes are the catalog's fill, not ours: they must have replaced ours
                "verified": ran.returncode == 0
                and len(matches) == rounds
                and got_cpp["version"] == last + rounds
                and got_cpp["checksum"] not in (expected, unpublished),
            }
            if ran.returncode != 0 or not cpp:
                cpp_row["log_tail"] = (ran.stdout + ran.stderr)[-2000:]
            entry["rows"].append(cpp_row)
        except _NoCppRow:
            pass
        finally:
            receiver.close()

    # torch baselines (the tensors' bytes again as published, for the checksums)
    randomize(torch, tensors)
    synchronize(torch, trainer_device)
    expected = checksum(torch, tensors)
    if args.channel == "nccl" or (args.channel == "shm" and args.dist):
        backend = "nccl" if args.channel == "nccl" else "gloo"
        entry["rows"] += run_dist_baselines(
            torch, args, manifest_path, tensors, expected, trainer_device, receiver_device, backend
        )
    else:
        entry["skipped"].append(
            "torch.distributed rows: need 2 GPUs (channel nccl)"
            if args.channel == "cuda_ipc"
            else "torch.distributed (gloo) rows: run without --no-dist"
        )
    if args.channel != "nccl":
        entry["rows"] += copy_baselines(torch, args, tensors, expected, trainer_device)
    del tensors, named
    if args.channel != "shm":
        torch.cuda.empty_cache()
    wsync_rows = {row["kind"]: row for row in entry["rows"]}
    py, cpp = wsync_rows.get("wsync-python"), wsync_rows.get("wsync-cpp")
    if py and cpp and cpp.get("median_ms"):
        entry["python_over_cpp"] = {
            "wall": py["median_ms"] / cpp["median_ms"],
            "outcome_total": py["outcome_total"]["median_ms"] / cpp["median_ms"],
        }
    for row in entry["rows"]:
        if row.get("median_ms") and py:
            row["vs_python"] = row["median_ms"] / py["median_ms"]
            row["gbps"] = total / row["median_ms"] / 1e6
    return entry


def copy_baselines(torch, args, tensors, expected, device):
    """One device (or the host): per-tensor copy_ into another copy of the model, and one copy_ of the whole model
    packed in one buffer (the copy floor)."""
    sizes = [tensor.numel() * tensor.element_size() for tensor in tensors]
    rows = []
    offsets, at = [], 0
    for size in sizes:  # 256-byte aligned, as allocations are
        offsets.append(at)
        at += (size + 255) // 256 * 256
    destination = torch.empty(at, dtype=torch.uint8, device=device)
    views = [destination[offset : offset + size] for offset, size in zip(offsets, sizes)]
    flats = [byte_view(torch, tensor) if tensor.numel() else None for tensor in tensors]
    pairs = [(view, flat) for view, flat in zip(views, flats) if flat is not None]

    def timed(body):
        times = []
        for _ in range(args.warmup + args.reps):
            step_kernel(torch, args, tensors, device)
            synchronize(torch, device)
            start = time.perf_counter()
            body()
            synchronize(torch, device)
            times.append((time.perf_counter() - start) * 1e3)
        return times[args.warmup :]

    def per_tensor():
        for view, flat in pairs:
            view.copy_(flat)

    times = timed(per_tensor)
    rows.append(
        {
            "path": "torch copy_ per tensor",
            "kind": "torch",
            "measure": "wall",
            **summary(times),
            "verified": verify_views(torch, views, tensors, expected),
        }
    )
    destination.zero_()
    source = torch.empty_like(destination)
    for flat, offset, size in zip(flats, offsets, sizes):
        if flat is not None:
            source[offset : offset + size].copy_(flat)
    times = timed(lambda destination=destination, source=source: destination.copy_(source))
    rows.append(
        {
            "path": "torch copy_ of the model packed in one buffer",
            "kind": "torch",
            "measure": "wall",
            **summary(times),
            "verified": verify_views(torch, views, tensors, expected),
        }
    )
    del source, destination
    return rows


def verify_views(torch, views, tensors, expected):
    shaped = [
        view.view(tensor.dtype).reshape(tensor.shape) if tensor.numel() else tensor
        for view, tensor in zip(views, tensors)
    ]
    return checksum(torch, shaped) == expected


# ---- report -------------------------------------------------------------------------------------------------------


def machine(torch, channel):
    info = {
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
    }
    if channel != "shm" and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            ).stdout.split()[0]
        except Exception:  # noqa: BLE001 - informational only
            info["driver"] = "?"
        info["cuda"] = torch.version.cuda
    return info


def git_commit():
    try:
        return subprocess.run(
            ["git", "-C", str(THIS.parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def markdown(result):
    m = result["machine"]
    lines = [
        f"# Python trainer publish benchmark ({result['date']}, commit {result['commit']})",
        "",
        f"Channel `{result['channel']}`; trainer on {result['trainer_device']}, one receiver (a Python "
        f"wsync.Worker bound to torch tensors) on {result['receiver_device']}"
        f"{', in the trainer' + chr(39) + 's process' if result.get('same_process') else ', a process of its own'}"
        f"{'; a kernel of the trainer' + chr(39) + 's before each timed round' if result.get('step_kernel') else ''}. "
        f"{result['warmup']} warm-up "
        f"rounds, then {result['reps']} timed: median (min-max).",
        "",
        f"Machine: {', '.join(m.get('gpus', [])) or 'CPU'}; driver {m.get('driver', '-')}; CUDA "
        f"{m.get('cuda', '-')}; torch {m['torch']}; Python {m['python']}; {m['cpu_count']} CPUs.",
        "",
    ]
    for entry in result["models"]:
        lines += [f"## {entry['model']}: {entry['tensors']} tensors, {entry['bytes'] / 1e9:.2f} GB", ""]
        if entry["rows"]:
            lines += [
                "| path | measure | median ms | min-max ms | GB/s | x wsync Python | bytes verified |",
                "|---|---|---:|---:|---:|---:|---|",
            ]
            for row in entry["rows"]:
                if not row.get("median_ms"):
                    lines.append(f"| {row['path']} | failed (exit {row.get('exit')}) | | | | | no |")
                    continue
                lines.append(
                    f"| {row['path']} | {row['measure']} | {row['median_ms']:.3f} | "
                    f"{row['min_ms']:.3f}-{row['max_ms']:.3f} | {row['gbps']:.0f} | "
                    f"{row['vs_python']:.3f} | {'yes' if row['verified'] else 'NO'} |"
                )
                if row["kind"] == "wsync-python":
                    t = row["outcome_total"]
                    lines.append(
                        f"| wsync Python | outcome total (agent: publish to outcome) | {t['median_ms']:.3f} "
                        f"| {t['min_ms']:.3f}-{t['max_ms']:.3f} | {entry['bytes'] / t['median_ms'] / 1e6:.0f}"
                        f" | | |"
                    )
                    t = row.get("outcome_sending")
                    floor = next(
                        (
                            other["median_ms"]
                            for other in entry["rows"]
                            if other["path"] == "torch copy_ of the model packed in one buffer"
                        ),
                        None,
                    )
                    if t and t["median_ms"] > 0:
                        over = f"{t['median_ms'] / floor:.3f}x the packed copy_" if floor else ""
                        lines.append(
                            f"| wsync Python | outcome sending (the payload through the channel) | "
                            f"{t['median_ms']:.3f} | {t['min_ms']:.3f}-{t['max_ms']:.3f} | "
                            f"{entry['bytes'] / t['median_ms'] / 1e6:.0f} | {over} | |"
                        )
            lines.append("")
        ratio = entry.get("python_over_cpp")
        if ratio:
            lines += [
                f"Python / C++ (medians): {ratio['outcome_total']:.3f}x on the outcome's total, "
                f"{ratio['wall']:.3f}x for the Python wall time (publish() call to wait() returned) over the "
                f"C++ total.",
                "",
            ]
        for reason in entry["skipped"]:
            lines.append(f"Skipped: {reason}.")
        if entry["skipped"]:
            lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", default="main", choices=["main", "receiver", "dist"], help=argparse.SUPPRESS)
    parser.add_argument("--bus", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--init", help=argparse.SUPPRESS)
    parser.add_argument("--channel", default="cuda_ipc", choices=["cuda_ipc", "nccl", "shm"])
    parser.add_argument(
        "--models",
        nargs="+",
        help="catalog models, or hf:NAME[:bf16] for the RL examples' "
        "transformers models (default: qwen2.5-7b qwen3-30b-a3b; "
        "--quick: tiny synthetic:48:24)",
    )
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds: a check, not a measurement")
    parser.add_argument("--warmup", type=int, help="unmeasured rounds per path (default 3, --quick 1)")
    parser.add_argument("--reps", type=int, help="timed rounds per path (default 20, --quick 3)")
    parser.add_argument("--trainer-device", type=int, default=0)
    parser.add_argument("--receiver-device", type=int, help="default: 0 for cuda_ipc, 1 for nccl")
    parser.add_argument("--bucket-mib", type=int, default=1024, help="packed broadcast bucket (default 1024)")
    parser.add_argument(
        "--step-kernel",
        action="store_true",
        help="before each timed round (wsync's and torch's), a kernel of the trainer's on its GPU, "
        "as an optimizer step leaves one",
    )
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="the receiving wsync.Worker in this process, beside the trainer (verl's hybrid engine), "
        "instead of a process of its own",
    )
    parser.add_argument(
        "--no-dist", dest="dist", action="store_false", help="shm: skip the torch.distributed (gloo) rows"
    )
    parser.add_argument("--out", help="write the markdown report here")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--commit", help="commit to name (default: git describe)")
    args = parser.parse_args()
    if args.warmup is None:
        args.warmup = 1 if args.quick else 3
    if args.reps is None:
        args.reps = 3 if args.quick else 20
    if args.role == "receiver":
        return receiver_main(args)
    if args.role == "dist":
        return dist_main(args)

    import tempfile

    import torch

    import wsync

    if args.models is None:
        args.models = ["tiny", "synthetic:48:24"] if args.quick else ["qwen2.5-7b", "qwen3-30b-a3b"]
    if args.receiver_device is None:
        args.receiver_device = 1 if args.channel == "nccl" else args.trainer_device
    if args.channel == "nccl" and torch.cuda.device_count() < 2:
        raise SystemExit(
            "--channel nccl needs 2 GPUs (trainer and receiver on different ones); on one GPU use --channel cuda_ipc"
        )
    if args.channel != "shm":
        torch.cuda.set_device(args.trainer_device)
    result = {
        "benchmark": "python-publish",
        "date": datetime.date.today().isoformat(),
        "commit": args.commit or git_commit(),
        "channel": args.channel,
        "same_process": args.same_process,
        "step_kernel": args.step_kernel,
        "trainer_device": "cpu" if args.channel == "shm" else f"cuda:{args.trainer_device}",
        "receiver_device": "cpu" if args.channel == "shm" else f"cuda:{args.receiver_device}",
        "warmup": args.warmup,
        "reps": args.reps,
        "quick": args.quick,
        "machine": machine(torch, args.channel),
        "wsync_library": wsync.library_path() if hasattr(wsync, "library_path") else None,
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="wsync-pybench-") as workdir:
        for model in args.models:
            print(f"== {model}", file=sys.stderr, flush=True)
            result["models"].append(bench_model(torch, wsync, args, model, Path(workdir)))
    report = markdown(result)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    failed = [row["path"] for entry in result["models"] for row in entry["rows"] if not row.get("verified")]
    if failed:
        print(f"not verified: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
