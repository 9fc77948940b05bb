"""The RL scenarios of examples/rl/ (sync RLHF, async with keep-mode pauses, FSDP2 to data-parallel workers), run as
the examples themselves: real processes (coordinator, policy, engines, FSDP2 ranks), a transformers causal LM, and
the examples' own exact checks (token for token, byte for byte), read back from their JSON records.

On the CPU (CI): the tiny model over shm (and tcp). Marker gpu: a Qwen3-shaped model over nccl and cuda_ipc, as
many GPUs as each case needs (skipped otherwise)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rl"
# A scenario on the tiny model takes seconds; a GPU one builds a model and trains it first. A GPU session shorter
# than that sets WSYNC_SCENARIO_TIMEOUT_S, so that a stalled case fails with its output kept rather than being cut.
SCENARIO_TIMEOUT_SECONDS = float(os.environ.get("WSYNC_SCENARIO_TIMEOUT_S", "900"))

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the examples' reference engine serves a transformers causal LM")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_fsdp2() -> bool:
    sys.path.insert(0, str(EXAMPLES))
    try:
        from fsdp2_to_dp import fully_shard_function
    finally:
        sys.path.remove(str(EXAMPLES))
    return fully_shard_function() is not None


def run_example(script: str, tmp_path: Path, *arguments: str) -> dict:
    """Runs examples/rl/<script>.py; its JSON record and output are also kept in $WSYNC_SCENARIO_RECORDS when set
    (the GPU runs whose logs go under bench/results/)."""
    record = tmp_path / f"{script}.json"
    # A session of its own: a stalled example is killed with every process it started (ranks, engines, the
    # coordinator), which would otherwise hold its output pipes open; what it printed until then (the stacks of
    # WSYNC_SCENARIO_STALL_DUMP_S among it) is kept as the diagnosis.
    command = [sys.executable, str(EXAMPLES / f"{script}.py"), "--json", str(record), *arguments]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=SCENARIO_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n(stalled: killed with its process group after {SCENARIO_TIMEOUT_SECONDS:.0f} s)"
    except BaseException:  # Ctrl-C, pytest's own timeout: the example's session does not outlive the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    keep = os.environ.get("WSYNC_SCENARIO_RECORDS")
    if keep:
        name = os.environ.get("PYTEST_CURRENT_TEST", script).split("::")[-1].split(" ")[0]
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}.log").write_text(done.stdout + done.stderr)
        if record.exists():
            (Path(keep) / f"{name}.json").write_text(record.read_text())
    shown = "\n".join(line for line in done.stdout.splitlines() if "PASS" not in line)
    assert done.returncode == 0, (
        f"{script} {' '.join(arguments)} exited {done.returncode}:\n{shown}\n{done.stderr[-4000:]}"
    )
    result = json.loads(record.read_text())
    failed = [check for check in result["checks"] if not check["passed"]]
    assert result["passed"] and not failed, failed
    return result


def checks(result: dict) -> list:
    return [check["check"] for check in result["checks"]]


# ---- CPU: every run of tools/test.sh ------------------------------------------------------------------------------


@pytest.mark.parametrize("channel", ["shm", "tcp"])
def test_sync_rlhf_the_engine_generates_what_the_trained_policy_generates(channel, tmp_path):
    result = run_example("sync_rlhf", tmp_path, "--channel", channel)
    names = checks(result)
    assert "version 2: the engine's outputs equal the trained policy's own" in names
    assert "the update changed the outputs" in names and "the engine holds version 2 byte for byte" in names


def test_async_keep_every_kept_request_continues_exactly_as_a_fresh_engine_of_the_new_version(tmp_path):
    result = run_example("async_keep", tmp_path, "--requests", "8")
    names = checks(result)
    assert any(name.startswith("update 1: a fresh V2 engine continues all 8 kept requests") for name in names)
    assert "every request's spans are V1 -> V2 at its pause points" in names
    assert len(result["timings"]["updates"]) == 1


def test_async_keep_two_updates_while_generating_give_three_spans_per_request(tmp_path):
    result = run_example("async_keep", tmp_path, "--requests", "8", "--updates", "2")
    names = checks(result)
    assert "every request's spans are V1 -> V2 -> V3 at its pause points" in names
    assert any(name.startswith("update 2: a fresh V3 engine continues") for name in names)
    assert "update 2: V2 would have continued otherwise" in names


@pytest.mark.skipif(not has_fsdp2(), reason=f"torch {torch.__version__} has no FSDP2 (fully_shard; torch >= 2.6)")
def test_fsdp2_ranks_on_the_cpu_update_two_data_parallel_engines(tmp_path):
    result = run_example("fsdp2_to_dp", tmp_path)
    names = checks(result)
    assert "version 2: engine-1's outputs equal the unsharded trainer model's" in names


# ---- GPUs ---------------------------------------------------------------------------------------------------------


def gpu_case(gpus: int, *values, fsdp2: bool = False):
    marks = [pytest.mark.gpu]
    if GPUS < gpus:
        marks.append(pytest.mark.skip(reason=f"needs {gpus} CUDA GPU(s), this machine has {GPUS}"))
    if fsdp2 and not has_fsdp2():
        marks.append(pytest.mark.skip(reason=f"torch {torch.__version__} has no FSDP2"))
    return pytest.param(*values, marks=marks, id=f"{values[0]}-{gpus}gpu")


GPU_MODEL = ("--model", "qwen3-small")


@pytest.mark.parametrize(
    "channel,trainer,engine",
    [
        gpu_case(2, "nccl", "cuda:0", "cuda:1"),
        gpu_case(1, "cuda_ipc", "cuda:0", "cuda:0"),
    ],
)
def test_sync_rlhf_on_gpus(channel, trainer, engine, tmp_path):
    run_example(
        "sync_rlhf", tmp_path, *GPU_MODEL, "--channel", channel, "--trainer-device", trainer, "--engine-device", engine
    )


@pytest.mark.parametrize(
    "channel,trainer,engine",
    [
        gpu_case(2, "nccl", "cuda:0", "cuda:1"),
        gpu_case(1, "cuda_ipc", "cuda:0", "cuda:0"),
    ],
)
@pytest.mark.parametrize("updates", ["1", "2"])
def test_async_keep_on_gpus(channel, trainer, engine, updates, tmp_path):
    run_example(
        "async_keep",
        tmp_path,
        *GPU_MODEL,
        "--channel",
        channel,
        "--trainer-device",
        trainer,
        "--engine-device",
        engine,
        "--updates",
        updates,
    )


@pytest.mark.parametrize(
    "channel,trainers,engines",
    [
        gpu_case(4, "nccl", "cuda:0,cuda:1", "cuda:2,cuda:3", fsdp2=True),
        gpu_case(2, "cuda_ipc", "cuda:0,cuda:1", "cuda:0,cuda:1", fsdp2=True),
    ],
)
def test_fsdp2_on_gpus(channel, trainers, engines, tmp_path):
    run_example(
        "fsdp2_to_dp",
        tmp_path,
        *GPU_MODEL,
        "--channel",
        channel,
        "--trainer-devices",
        trainers,
        "--engine-devices",
        engines,
    )
