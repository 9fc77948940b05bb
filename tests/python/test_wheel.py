"""The package as users install it: `pip wheel ./python` (scikit-build-core compiles libwsync.so and
wsync-coordinator in its own build folder, build-python/), one py3-none-linux_x86_64 wheel, installed into a fresh
virtual environment without numpy or torch, imported outside the checkout and used end to end. Also in every other
CPython >= 3.10 found on PATH (python3.10 ... python3.14), when there is one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import HELPERS, PACKAGE_ROOT

pytestmark = pytest.mark.wheel

# The wheel's build compiles the two native targets and what they link; on 2 cores about 5 minutes.
BUILD_TIMEOUT_SECONDS = 1500
OTHER_PYTHONS = [f"python3.{minor}" for minor in range(10, 15)]


def clean_env() -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("WSYNC_") and key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel under test: WSYNC_WHEEL when set (tools/test.sh builds it once, for these tests and the vLLM
    stage), else built here."""
    prebuilt = os.environ.get("WSYNC_WHEEL")
    if prebuilt:
        return Path(prebuilt)
    dist = tmp_path_factory.mktemp("dist")
    env = clean_env()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(PACKAGE_ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_one_wheel_for_every_cpython(wheel):
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = archive.getinfo("wsync/_native/bin/wsync-coordinator")
        assert (info.external_attr >> 16) & 0o111, "wsync-coordinator is not executable in the wheel"
        metadata = archive.read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
    for required in (
        "wsync/__init__.py",
        "wsync/_native.py",
        "wsync/_tensors.py",
        "wsync/connection.py",
        "wsync/outcome.py",
        "wsync/trainer.py",
        "wsync/worker.py",
        "wsync/_native/lib/libwsync.so",
        "wsync/_native/bin/wsync-coordinator",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    assert not any(name.endswith(".pyc") or "/tests/" in name for name in names)
    assert "Requires-Python: >=3.10" in metadata
    assert "Requires-Dist" not in metadata.split("Provides-Extra")[0], "runtime dependencies in the wheel"


def install_and_run(python: str, wheel: Path, where: Path) -> str:
    venv = where / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300, env=clean_env())
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    script = where / "smoke.py"
    shutil.copy(HELPERS / "wheel_smoke.py", script)
    run = subprocess.run(
        [str(venv / "bin" / "python"), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=where,
        env=clean_env(),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip().splitlines()[-1]


def test_the_wheel_works_in_a_fresh_virtual_environment(wheel, tmp_path):
    line = install_and_run(getattr(sys, "_base_executable", sys.executable), wheel, tmp_path)
    assert line.startswith("WHEEL OK")


def usable_pythons():
    """(version, path) of each CPython found: python3.N on PATH, and the paths in $WSYNC_TEST_PYTHONS (':')."""
    found = []
    candidates = [shutil.which(name) for name in OTHER_PYTHONS]
    candidates += [path for path in os.environ.get("WSYNC_TEST_PYTHONS", "").split(":") if path]
    for path in candidates:
        if not path:
            continue
        probe = subprocess.run(
            [path, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        version = probe.stdout.strip()
        if probe.returncode == 0 and version not in dict(found):
            found.append((version, path))
    return found


@pytest.mark.parametrize("minor", [f"3.{minor}" for minor in range(10, 15)])
def test_the_same_wheel_in_other_cpythons(wheel, tmp_path, minor):
    available = dict(usable_pythons())
    if minor == f"{sys.version_info[0]}.{sys.version_info[1]}":
        pytest.skip(f"CPython {minor} is the one running the tests (the test above)")
    if minor not in available:
        pytest.skip(f"no usable python{minor} on PATH or in WSYNC_TEST_PYTHONS")
    line = install_and_run(available[minor], wheel, tmp_path)
    assert line.startswith(f"WHEEL OK python {minor}")
