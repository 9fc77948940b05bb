"""One coordinator per bus: the shipped wsync-coordinator program (default) or a thread of this process."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import IO
from urllib.parse import urlparse

from . import _native as N
from ._closing import Closing
from .connection import Connection
from .errors import InvalidArgumentError, StoppedError, UnavailableError

__all__ = ["Coordinator"]

MIB = 1 << 20
# After SIGTERM the program gets this long to remove its segments and socket files before SIGKILL.
STOP_GRACE_SECONDS = 5.0
# The program's exit code when the bus already has a live coordinator (coordinator/app/main.cpp).
EXIT_BUS_TAKEN = 3


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(round(seconds * 1000))


class Coordinator(Closing):
    """Starts the bus's coordinator now; ``stop()`` (or leaving the ``with`` block) stops it.

    Timeouts are in seconds and sizes in bytes (the program takes whole MiB); None keeps the coordinator's default.
    The program's log goes to `log_file` (a path or an open file) or, by default, to a temporary file whose tail
    is quoted when it fails to start (``log_text()`` reads it until stop() removes it). In process, the coordinator
    (like every agent of this process) logs to stderr through the library's logger, whose level the environment
    variable WSYNC_LOG_LEVEL sets (the C API has no call for it); `log_level` and `log_file` are the program's."""

    def __init__(
        self,
        bus: str,
        transport: str | None = None,
        in_process: bool = False,
        heartbeat_timeout: float | None = None,
        pause_timeout: float | None = None,
        transfer_timeout: float | None = None,
        bucket_bytes: int | None = None,
        gpu_bucket_bytes: int | None = None,
        curve_keys=None,
        allowed_keys=None,
        insecure: bool = False,
        log_level: str = "warn",
        heartbeat_interval: float | None = None,
        buffer_count: int | None = None,
        log_file: str | os.PathLike | IO | None = None,
        start_timeout: float = 30.0,
        extra_args: Sequence[str] = (),
    ):
        self.bus = bus
        self.transport = transport
        self.in_process = in_process
        self._handle: ctypes.c_void_p | None = None
        self._process: subprocess.Popen | None = None
        self._log: IO | None = None
        self._log_path: str | None = None
        self._log_is_temporary = False
        self._curve = (curve_keys, allowed_keys, insecure)
        if in_process:
            self._start_in_process(
                heartbeat_interval,
                heartbeat_timeout,
                pause_timeout,
                transfer_timeout,
                bucket_bytes,
                buffer_count,
                gpu_bucket_bytes,
                curve_keys,
                allowed_keys,
                insecure,
            )
        else:
            self._start_program(
                heartbeat_interval,
                heartbeat_timeout,
                pause_timeout,
                transfer_timeout,
                bucket_bytes,
                buffer_count,
                gpu_bucket_bytes,
                curve_keys,
                allowed_keys,
                insecure,
                log_level,
                log_file,
                start_timeout,
                extra_args,
            )

    # -- in this process ---------------------------------------------------------------------------------------
    def _start_in_process(
        self, interval, heartbeat, pause, transfer, bucket, buffers, gpu_bucket, curve_keys, allowed_keys, insecure
    ) -> None:
        lib = N.lib()
        config = N.CoordinatorConfig()
        lib.wsync_coordinator_config_init(ctypes.byref(config))
        strings = [N.encode(self.bus), N.encode(self.transport), N.encode(curve_keys), N.encode(allowed_keys)]
        config.bus, config.transport, config.curve_keys, config.allowed_keys = strings
        for field, value in (
            ("heartbeat_interval_ms", _ms(interval)),
            ("heartbeat_timeout_ms", _ms(heartbeat)),
            ("pause_timeout_ms", _ms(pause)),
            ("transfer_timeout_ms", _ms(transfer)),
            ("bucket_bytes", bucket),
            ("buffer_count", buffers),
            ("gpu_bucket_bytes", gpu_bucket),
        ):
            if value is not None:
                setattr(config, field, value)
        config.insecure = 1 if insecure else 0
        handle = ctypes.c_void_p()
        N.check(lib.wsync_coordinator_start(ctypes.byref(config), ctypes.byref(handle)))
        self._lib = lib
        self._handle = handle

    # -- the program -------------------------------------------------------------------------------------------
    def _start_program(
        self,
        interval,
        heartbeat,
        pause,
        transfer,
        bucket,
        buffers,
        gpu_bucket,
        curve_keys,
        allowed_keys,
        insecure,
        log_level,
        log_file,
        start_timeout,
        extra_args,
    ) -> None:
        program = N.find_program("wsync-coordinator")
        command = [program, "--bus", self.bus, "--log-level", log_level]
        if self.transport:
            command += ["--transport", self.transport]
        for flag, value in (
            ("--heartbeat-interval-ms", _ms(interval)),
            ("--heartbeat-timeout-ms", _ms(heartbeat)),
            ("--pause-timeout-ms", _ms(pause)),
            ("--transfer-timeout-ms", _ms(transfer)),
            ("--buffers", buffers),
        ):
            if value is not None:
                command += [flag, str(value)]
        for flag, value in (("--bucket-mib", bucket), ("--gpu-bucket-mib", gpu_bucket)):
            if value is not None:
                if value <= 0 or value % MIB:
                    raise InvalidArgumentError(
                        f"{flag[2:].replace('-mib', '')} of {value} bytes: the program takes "
                        f"whole MiB (or use in_process=True)"
                    )
                command += [flag, str(value // MIB)]
        if curve_keys:
            command += ["--curve-keys", os.fspath(curve_keys)]
        if allowed_keys:
            command += ["--allow-keys", os.fspath(allowed_keys)]
        if insecure:
            command.append("--insecure")
        command += list(extra_args)
        self.command = command
        # A bus that answers already has its coordinator: the program would exit 3, and until it did, that other
        # coordinator's answers would look like its own.
        if not curve_keys and self._answers(False):
            raise UnavailableError(f"bus '{self.bus}' already has a live coordinator (it answers status requests)")

        if log_file is None:
            self._log = tempfile.NamedTemporaryFile(
                prefix=f"wsync-coordinator-{self.bus}-", suffix=".log", delete=False
            )
            self._log_path = self._log.name
            self._log_is_temporary = True
            output = self._log
        elif hasattr(log_file, "write"):
            output = log_file
        else:
            self._log_path = os.fspath(log_file)
            self._log = open(self._log_path, "ab")
            output = self._log
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Until the coordinator answers (a status request; over CURVE, its tcp port accepting connections)."""
        deadline = time.monotonic() + timeout
        curve = bool(self._curve[0])
        while True:
            code = self._process.poll()
            if code is not None:
                why = "the bus already has a live coordinator" if code == EXIT_BUS_TAKEN else f"exit code {code}"
                raise UnavailableError(f"wsync-coordinator for bus '{self.bus}' exited at start ({why}){self._tail()}")
            if self._answers(curve):
                time.sleep(0.05)  # one that lost a race for the bus exits at once: tell it from the winner
                if self._process.poll() is None:
                    return
                continue
            if time.monotonic() >= deadline:
                raise UnavailableError(
                    f"wsync-coordinator for bus '{self.bus}' did not answer within {timeout} s{self._tail()}"
                )
            time.sleep(0.02)

    def _answers(self, curve: bool) -> bool:
        if curve:
            address = urlparse(self.transport or "")
            try:
                with socket.create_connection((address.hostname, address.port), timeout=0.2):
                    return True
            except OSError:
                return False
        lib = N.lib()
        connection, strings = N.connection(Connection(self.bus, self.transport))
        text = ctypes.c_void_p()
        status = lib.wsync_bus_status(ctypes.byref(connection), 200, ctypes.byref(text))
        del strings
        if status == N.OK:
            N.take_string(text)
            return True
        return False

    def log_text(self) -> str:
        """What the program has logged so far ("" in process, or when the log went to a file object)."""
        if not self._log_path:
            return ""
        try:
            with open(self._log_path, "rb") as log:
                return N.text(log.read())
        except OSError:
            return ""

    def _tail(self, lines: int = 15) -> str:
        text = self.log_text().strip()
        if not text:
            return ""
        return "; its log ends:\n" + "\n".join(text.splitlines()[-lines:])

    # -- both --------------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The program's process id (this process's when in process)."""
        return self._process.pid if self._process is not None else os.getpid()

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._handle is not None

    @property
    def committed_version(self) -> int:
        """The bus's committed version (in process: one atomic load; the program: a status request)."""
        if self._handle is not None:
            return self._lib.wsync_coordinator_committed_version(self._handle)
        if not self.running:
            raise StoppedError(f"the coordinator of bus '{self.bus}' is not running")
        from .monitor import status

        return int(status(Connection(self.bus, self.transport))["committed_version"])

    def stop(self) -> None:
        """Stops the coordinator: in process, destroys it; the program gets SIGTERM, then SIGKILL after 5 s.
        Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.wsync_coordinator_destroy(handle)
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
            if self._log_is_temporary:
                try:
                    os.unlink(self._log_path)
                except OSError:
                    pass
                self._log_path = None

    def close(self) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "in process" if self.in_process else f"pid {self.pid}"
        return f"<wsync.Coordinator bus '{self.bus}' ({where}, {'running' if self.running else 'stopped'})>"
