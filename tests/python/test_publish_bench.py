"""bench/python/publish.py in its CPU form (--quick --channel shm: CPU tensors, small catalog shapes), so the
benchmark cannot rot: every row runs and every row's bytes are verified. Seconds; the measurement itself runs on
GPU machines (docs/python.md, "The publish benchmark")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "python" / "publish.py"

pytest.importorskip("torch")


def test_the_publish_benchmark_runs_and_verifies_every_row_on_the_cpu(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    out = tmp_path / "publish.json"
    ran = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--channel",
            "shm",
            "--models",
            "tiny",
            "synthetic:24:8",
            "--warmup",
            "1",
            "--reps",
            "2",
            "--json",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(out.read_text())
    assert [entry["model"] for entry in result["models"]] == ["tiny", "synthetic:24:8"]
    for entry in result["models"]:
        kinds = [row["kind"] for row in entry["rows"]]
        assert kinds[:2] == ["wsync-python", "wsync-cpp"] and kinds.count("torch") == 4, kinds
        assert all(row["verified"] and row["median_ms"] > 0 for row in entry["rows"]), entry["rows"]
        assert entry["rows"][1]["receiver"]["holds"] == "other bytes (the C++ trainer's)"
        assert "python_over_cpp" in entry
    assert "| wsync Python" in ran.stdout
