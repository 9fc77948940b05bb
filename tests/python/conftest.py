"""Fixtures of the Python tests: the built libwsync.so and wsync-coordinator (WSYNC_LIBRARY / WSYNC_BIN_DIR, as
tools/test.sh sets them, else found in build/), unique bus names, coordinators, and helper processes that report
JSON lines."""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO_ROOT / "python"
HELPERS = Path(__file__).resolve().parent / "helpers"


def _find_native() -> None:
    """WSYNC_LIBRARY and WSYNC_BIN_DIR from the build tree when not set (tools/test.sh sets them)."""
    build = Path(os.environ.get("WSYNC_BUILD_DIR", REPO_ROOT / "build"))
    if not os.environ.get("WSYNC_LIBRARY"):
        found = sorted(build.glob("**/libwsync.so"))
        if found:
            os.environ["WSYNC_LIBRARY"] = str(found[0])
    if not os.environ.get("WSYNC_BIN_DIR"):
        program = build / "tools" / "coordinator" / "wsync-coordinator"
        found = [program] if program.exists() else sorted(build.glob("**/wsync-coordinator"))
        if found:
            os.environ["WSYNC_BIN_DIR"] = str(found[0].parent)


_find_native()
# The checkout's package, in this process and in every helper process.
sys.path.insert(0, str(PACKAGE_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(PACKAGE_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

import wsync  # noqa: E402


def pytest_report_header(config):
    lines = [f"wsync package: {PACKAGE_ROOT / 'wsync'}"]
    try:
        lines.append(f"libwsync.so: {wsync.library_path()} ({wsync.native_version()})")
    except wsync.Error as error:
        lines.append(f"libwsync.so: not found ({error})")
    lines.append(f"programs: {os.environ.get('WSYNC_BIN_DIR', '(PATH)')}")
    return lines


@pytest.fixture(scope="session", autouse=True)
def native_library():
    try:
        return wsync.library_path()
    except wsync.Error as error:
        pytest.exit(f"the Python tests need the built libwsync.so: {error}", returncode=2)


_bus_numbers = itertools.count()


@pytest.fixture
def bus() -> str:
    """A bus name no other test (or test run) uses."""
    return f"py{os.getpid()}-{next(_bus_numbers)}"


@pytest.fixture
def coordinator(bus):
    """The shipped wsync-coordinator program on `bus`, with a short heartbeat timeout (dead agents are found in
    about a second)."""
    with wsync.Coordinator(bus, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=10.0) as running:
        yield running


@pytest.fixture
def in_process_coordinator(bus):
    with wsync.Coordinator(
        bus, in_process=True, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=10.0
    ) as running:
        yield running


class Helper:
    """A helper script as a child process; its stdout lines are JSON events, read by a thread."""

    def __init__(self, script: str, *args: str, stdin=subprocess.PIPE, env: dict[str, str] | None = None):
        self.name = f"{script} {' '.join(args)}"
        self.process = subprocess.Popen(
            [sys.executable, str(HELPERS / script), *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or os.environ.copy(),
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "text", "text": line.rstrip("\n")}
            self.events.put(event)

    def _read_stderr(self):
        for line in self.process.stderr:
            self.stderr_lines.append(line)

    def expect(self, event: str, timeout: float = 30.0, **fields) -> dict:
        """The next event named `event` (with these field values), skipping others; fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"{self.name}: no '{event}' {fields or ''} within {timeout} s; seen "
                    f"{self.seen[-10:]}; stderr: {''.join(self.stderr_lines)[-3000:]}"
                )
            try:
                got = self.events.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.process.poll() is not None and self.events.empty():
                    time.sleep(0.2)  # let the readers drain
                    if self.events.empty():
                        raise AssertionError(
                            f"{self.name} exited ({self.process.returncode}) before '{event}'; "
                            f"seen {self.seen[-10:]}; stderr: "
                            f"{''.join(self.stderr_lines)[-3000:]}"
                        ) from None
                continue
            self.seen.append(got)
            if got.get("event") == event and all(got.get(key) == value for key, value in fields.items()):
                return got

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still runs after {timeout} s; stderr: {''.join(self.stderr_lines)[-3000:]}"
            ) from None

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 30.0) -> int:
        """Closes stdin (a serving worker then exits) and waits."""
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        return self.wait(timeout)

    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream:
                try:
                    stream.close()
                except OSError:
                    pass


@pytest.fixture
def helpers():
    """Starts helper processes (helpers(script, *args)); kills any still running when the test ends."""
    started: list[Helper] = []

    def start(script: str, *args: str, **kwargs) -> Helper:
        helper = Helper(script, *args, **kwargs)
        started.append(helper)
        return helper

    yield start
    for helper in started:
        helper.cleanup()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)
