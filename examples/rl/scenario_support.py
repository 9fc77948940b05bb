"""What wsync's RL examples share, none of it wsync: the other side of a scenario in a process of its own (a Peer),
the arguments, the engine's seed, and a report of checks that makes the example exit non-zero when one fails. The
wsync calls (Trainer, publish, Worker, wait_for_version) are in the scenarios themselves."""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Deterministic cuBLAS needs this before CUDA starts in the process (spawned children inherit it).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import policy_models
import torch
from reference_engine import ReferenceEngine, deterministic

__all__ = [
    "Peer",
    "Link",
    "use_device",
    "greedy_outputs",
    "Report",
    "fresh_engine",
    "device_index",
    "common_arguments",
    "unique_bus",
    "outputs",
    "describe_outcome",
    "exit_with",
    "serve",
    "outcome_record",
    "answer_of",
    "stop_processes",
    "ENGINE_SEED",
    "COMMAND_TIMEOUT_SECONDS",
]

# A policy's answer to one command: training a 0.6B model or a round over a slow channel stays well inside this.
# WSYNC_SCENARIO_COMMAND_TIMEOUT_S shortens it where a GPU session's time box is shorter than a stall would take.
COMMAND_TIMEOUT_SECONDS = float(os.environ.get("WSYNC_SCENARIO_COMMAND_TIMEOUT_S", "900"))
# WSYNC_SCENARIO_STALL_DUMP_S: a command process still busy with one command after this many seconds prints every
# Python thread's stack to stderr (again each as many seconds), so that a stalled run shows where it waits.
STALL_DUMP_SECONDS = float(os.environ.get("WSYNC_SCENARIO_STALL_DUMP_S", "0"))
# How long a process told to stop may take to close its agent before it is killed.
STOP_GRACE_SECONDS = 60.0
# The engine's initial weights are drawn from this seed, the policy's from another: the engine holds the policy's
# version only if wsync delivered it.
ENGINE_SEED = 12345


def device_index(device: str) -> int | None:
    parsed = torch.device(device)
    return None if parsed.type == "cpu" else (parsed.index or 0)


def unique_bus(name: str) -> str:
    return f"{name}-{os.getpid()}"


def common_arguments(parser, model: str = "tiny") -> None:
    parser.add_argument("--model", default=model, choices=sorted(policy_models.MODELS))
    parser.add_argument("--channel", default="shm", choices=["shm", "tcp", "nccl", "cuda_ipc"])
    parser.add_argument("--trainer-device", default="cpu", help="cpu, cuda:0, ...")
    parser.add_argument("--engine-device", default="cpu")
    parser.add_argument("--seed", type=int, default=1, help="the policy's initial weights (version 1)")
    parser.add_argument("--train-steps", type=int, default=3, help="optimizer steps from one version to the next")
    parser.add_argument("--json", help="write what ran, the checks and the timings here")
    parser.add_argument("--bus", help="bus name (default: unique to this run)")


# ---- the two sides: this process and a peer -------------------------------------------------------------------


def use_device(device: str) -> None:
    """Deterministic kernels, and `device` as the process's current CUDA device when it is one."""
    deterministic()
    if torch.device(device).type == "cuda":
        torch.cuda.set_device(torch.device(device))


class Link:
    """A peer's end of its pipe to the driver: send() a value, receive() the next one."""

    def __init__(self, connection, who: str):
        self._connection = connection
        self._who = who

    def send(self, value: Any) -> None:
        self._connection.send(("ok", value))

    def receive(self, timeout: float = COMMAND_TIMEOUT_SECONDS) -> Any:
        value = answer_of(self._connection, timeout, self._who)
        if value == _STOP:
            raise SystemExit(0)  # the driver is done with this peer, whatever it was waiting for
        return value


_STOP = "__stop__"


class Peer:
    """`function(link, *args)` in a process of its own (spawned: CUDA in a child needs it), the other side of a
    scenario (a trainer, an engine). It talks to the driver through `link` (a Link); the driver sends with send()
    and takes its answers with receive(), which raises with the peer's traceback when the function failed."""

    def __init__(self, function: Callable, *args, name: str):
        context = multiprocessing.get_context("spawn")
        self.name = name
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_run_peer, args=(child, name, function, args), name=name, daemon=True)
        self._process.start()
        child.close()

    def send(self, value: Any) -> None:
        self._connection.send(("ok", value))

    def receive(self, timeout: float = COMMAND_TIMEOUT_SECONDS) -> Any:
        return answer_of(self._connection, timeout, self.name)

    def close(self) -> None:
        """Tells the peer to stop (a receive() there ends it) and waits for it to close its agent."""
        stop_processes([(self._process, self._connection)], message=("ok", _STOP))


def _run_peer(connection, name: str, function: Callable, args) -> None:
    if STALL_DUMP_SECONDS > 0:  # stacks if the peer runs that long, and again each as many seconds
        faulthandler.dump_traceback_later(STALL_DUMP_SECONDS, repeat=True)
    try:
        function(Link(connection, f"the driver of {name}"), *args)
    except SystemExit:
        pass
    except BaseException:  # noqa: BLE001 - reported to the driver, whose receive() raises it
        connection.send(("error", traceback.format_exc()))


def greedy_outputs(model, device: str, prompts, max_tokens) -> list[list[int]]:
    """A model's own greedy outputs, through the same engine code as the engines' (no worker, no version)."""
    with ReferenceEngine(model, device) as engine:
        return [request.tokens for request in engine.generate(prompts, max_tokens)]


def outcome_record(outcome) -> dict[str, Any]:
    """A wsync.Outcome as the driver reads it (plain values: it crosses a pipe)."""
    return {
        "version": outcome.version,
        "kind": str(outcome.kind),
        "reason": outcome.reason,
        "detail": outcome.detail,
        "bytes": outcome.bytes,
        "total_s": outcome.total,
        "until_plan_s": outcome.until_plan,
        "sending_s": outcome.sending,
    }


def serve(connection, server_class, *args) -> None:
    """A command process's loop (the FSDP2 ranks, driven in lockstep): builds server_class(*args) (a failure is
    reported to the driver), then answers each (command, args) with server.handle(command, args) until "stop",
    which runs server.close()."""

    def watch(what: str) -> None:  # STALL_DUMP_SECONDS: stacks if `what` takes that long
        if STALL_DUMP_SECONDS > 0:
            print(f"[{multiprocessing.current_process().name}] {what}", file=sys.stderr, flush=True)
            faulthandler.dump_traceback_later(STALL_DUMP_SECONDS, repeat=True)

    try:
        watch("starting")
        server = server_class(*args)
        faulthandler.cancel_dump_traceback_later()
        connection.send(("ok", "ready"))
    except BaseException:  # noqa: BLE001 - reported to the driver
        connection.send(("error", traceback.format_exc()))
        return
    while True:
        command, arguments = connection.recv()
        watch(command)
        if command == "stop":
            server.close()
            return
        try:
            answer = ("ok", server.handle(command, arguments))
        except BaseException:  # noqa: BLE001 - reported to the driver, which decides
            answer = ("error", traceback.format_exc())
        faulthandler.cancel_dump_traceback_later()
        connection.send(answer)


def answer_of(connection, timeout: float, who: str) -> Any:
    if not connection.poll(timeout):
        raise TimeoutError(f"{who} did not answer within {timeout} s")
    try:
        kind, value = connection.recv()
    except EOFError:
        raise RuntimeError(f"{who} exited without answering (a crash: its output is above)") from None
    if kind == "error":
        raise RuntimeError(f"{who} failed:\n{value}")
    return value


def stop_processes(pairs, message=("stop", ())) -> None:
    """Asks every process to stop before waiting for any: a rank's stop can wait for its peers' (torch's
    destroy_process_group over NCCL does), so asking one rank after another costs a grace period per rank."""
    pairs = list(pairs)
    for process, connection in pairs:
        if process.is_alive():
            try:
                connection.send(message)
            except OSError:
                pass
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process, _ in pairs:
        process.join(max(0.0, deadline - time.monotonic()))
    for process, _ in pairs:
        if process.is_alive():
            process.kill()
            process.join()


def fresh_engine(model: str, device: str, state_path) -> ReferenceEngine:
    """An engine holding only the version saved at `state_path` (no worker, no other version ever loaded)."""
    built = policy_models.build(model, ENGINE_SEED, device)
    policy_models.load_state(built, state_path)
    return ReferenceEngine(built, device)


# ---- checks -------------------------------------------------------------------------------------------------------


class Report:
    """Checks and measurements of one run: each check prints PASS or FAIL with what differed; finish() writes the
    JSON record and returns the exit code (1 when any check failed)."""

    def __init__(self, scenario: str, arguments):
        self.record: dict[str, Any] = {
            "scenario": scenario,
            "arguments": vars(arguments),
            "checks": [],
            "timings": {},
            "machine": _machine(),
        }
        self.path = arguments.json
        self.failed = 0
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(text, flush=True)

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.record["checks"].append({"check": name, "passed": bool(passed), "detail": detail})
        if not passed:
            self.failed += 1
        self.say(f"{'PASS' if passed else 'FAIL'} {name}{': ' + detail if detail and not passed else ''}")
        return passed

    def same_tokens(self, name: str, got: Sequence[Sequence[int]], expected: Sequence[Sequence[int]]) -> bool:
        """Token for token; names the first request and position that differ."""
        for index, (mine, theirs) in enumerate(zip(got, expected)):
            if list(mine) != list(theirs):
                position = next(
                    (at for at, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
                )
                return self.check(
                    name,
                    False,
                    f"request {index} differs at token {position}: "
                    f"{list(mine)[position : position + 4]} vs "
                    f"{list(theirs)[position : position + 4]} "
                    f"({len(mine)} vs {len(theirs)} tokens)",
                )
        if len(got) != len(expected):
            return self.check(name, False, f"{len(got)} outputs vs {len(expected)}")
        return self.check(name, True)

    def same_weights(self, name: str, got: dict[str, str], expected: dict[str, str]) -> bool:
        differing = [key for key in expected if got.get(key) != expected[key]]
        missing = sorted(set(expected) ^ set(got))
        return self.check(
            name,
            not differing and not missing,
            f"{len(differing)} of {len(expected)} tensors differ (first: {(differing or missing)[0]})"
            if differing or missing
            else "",
        )

    def timing(self, key: str, value: Any) -> None:
        self.record["timings"][key] = value

    def finish(self) -> int:
        self.record["seconds"] = round(time.monotonic() - self.started, 3)
        self.record["passed"] = self.failed == 0
        if self.path:
            Path(self.path).write_text(json.dumps(self.record, indent=2) + "\n")
        self.say(
            f"{self.record['scenario']}: {'all checks passed' if self.failed == 0 else f'{self.failed} checks FAILED'}"
            f" ({self.record['seconds']} s)"
        )
        return 0 if self.failed == 0 else 1


def _machine() -> dict[str, Any]:
    import platform

    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
    return info


def outputs(requests) -> list[list[int]]:
    return [list(request.tokens) for request in requests]


def describe_outcome(outcome: dict[str, Any]) -> str:
    text = f"version {outcome['version']} {outcome['kind']}"
    if outcome["kind"] != "committed":
        text += f" ({outcome['reason'] or ''} {outcome['detail']})"
    return text + f" in {outcome['total_s'] * 1000:.1f} ms ({outcome['bytes'] / 1e6:.1f} MB)"


def exit_with(report: Report) -> None:
    sys.exit(report.finish())
