"""The vLLM examples (examples/vllm/), each run as a user runs it, live: Ray, vLLM's engine on the CPU, a trainer
actor publishing over wsync. Each writes a report (--report); the tests check what the example claims from the
report's raw outputs, and the tokens before any update against the checkpoint's own model here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "vllm"
# One example: Ray's start, a vLLM engine's (about 20 s on 2 cores), the rounds; allow for a loaded machine.
EXAMPLE_TIMEOUT_S = 600.0
# The examples' prompts and sizes (examples/vllm/tiny_qwen3.py, rlhf.py, rlhf_async.py).
sys.path.insert(0, str(EXAMPLES))
from tiny_qwen3 import PROMPTS  # noqa: E402

RLHF_TOKENS = 16
RLHF_ITERATIONS = 2
PAUSE_TOKEN_THRESHOLD = 10
ASYNC_NEW_TOKENS = 200


def run_example(script: str, model_dir: Path, bus: str, report: Path, *options: str) -> dict:
    command = [sys.executable, str(EXAMPLES / script), "--model", str(model_dir), "--bus", bus]
    command += ["--report", str(report), *options]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S, env=env)
    output = (finished.stdout + finished.stderr)[-6000:]
    assert finished.returncode == 0, f"{script} exited {finished.returncode}:\n{output}"
    assert finished.stdout.rstrip().endswith("PASSED"), output
    return json.loads(report.read_text())


def spans(*triples) -> list[list]:
    return [list(triple) for triple in triples]


def test_rlhf(model_dir, bus, tmp_path):
    report = run_example("rlhf.py", model_dir, bus, tmp_path / "report.json", "--max-tokens", str(RLHF_TOKENS))
    assert report["failures"] == []
    initial = report["initial"]
    assert initial["tokens"] == tiny_model.greedy(tiny_model.model(0), PROMPTS, RLHF_TOKENS)
    assert initial["spans"] == [spans(("default", 0, RLHF_TOKENS))] * len(PROMPTS)
    previous = initial["tokens"]
    assert [i["version"] for i in report["iterations"]] == list(range(1, RLHF_ITERATIONS + 1))
    for iteration in report["iterations"]:
        version = iteration["version"]
        assert iteration["tokens"] == iteration["expected"], f"version {version}: the engine is not the trainer"
        assert iteration["tokens"] != previous, f"version {version}: the update changed no output"
        assert iteration["spans"] == [spans((str(version), 0, RLHF_TOKENS))] * len(PROMPTS)
        previous = iteration["tokens"]


@pytest.mark.parametrize("cache", ["clear_cache", "keep_kv_cache"])
def test_rlhf_async(model_dir, bus, tmp_path, cache):
    options = ["--new-tokens", str(ASYNC_NEW_TOKENS)] + (["--keep-kv-cache"] if cache == "keep_kv_cache" else [])
    report = run_example("rlhf_async.py", model_dir, bus, tmp_path / "report.json", *options)
    assert report["failures"] == []
    assert report["clear_cache"] == (cache == "clear_cache")
    total = PAUSE_TOKEN_THRESHOLD + ASYNC_NEW_TOKENS
    initial_model = tiny_model.model(0)
    other_differs = []
    for request in report["requests"]:
        tokens, (old, new) = request["tokens"], request["spans"]
        boundary = old[2]
        # The pause waited for the threshold, and the requests were still in flight when it came.
        assert PAUSE_TOKEN_THRESHOLD <= boundary < total
        assert [old, new] == spans(("default", 0, boundary), ("1", boundary, total))
        assert request["pause_index"] == boundary, "vLLM's example and wsync's spans place the swap apart"
        assert tokens[:boundary] == tiny_model.greedy(initial_model, [request["prompt"]], boundary)[0]
        after = tokens[boundary:]
        # With clear_cache (vLLM's default) the frozen requests are preempted and prefilled again by the new
        # weights: vLLM's own check holds. Without it they continue over the old weights' KV cache.
        applies, other = ("fresh", "keep") if cache == "clear_cache" else ("keep", "fresh")
        assert after == request[f"{applies}_reference"]
        other_differs.append(after != request[f"{other}_reference"])
    assert any(other_differs), "the two references agree here: this run cannot tell the pause's semantics apart"
    after_update = report["after_update"]
    assert after_update["tokens"] == after_update["expected"]
