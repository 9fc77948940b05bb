"""wsync's exceptions. Every one carries ``.status`` (the C API's status name, ``wsync_status_name``) and
``.detail`` (wsync's own text: it names the tensor, the option or the coordinator's answer)."""

from __future__ import annotations

import builtins
import re

from .outcome import Outcome

__all__ = [
    "Error",
    "TimeoutError",
    "InvalidArgumentError",
    "ManifestMismatchError",
    "UnavailableError",
    "BusyError",
    "StoppedError",
    "UnsupportedError",
    "InternalError",
    "AbortedError",
    "RefusedError",
]


class Error(Exception):
    """Base of every wsync error."""

    status: str = "internal"

    def __init__(self, detail: str = "", status: str | None = None):
        super().__init__(detail)
        self.detail = detail
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.detail or self.status


class TimeoutError(Error, builtins.TimeoutError):
    """Nothing happened within the timeout; the call may be repeated (a version in flight is still in flight)."""

    status = "timeout"


class InvalidArgumentError(Error, ValueError):
    """A NULL handle, an option out of range, or a tensor wsync cannot take (named in the text)."""

    status = "invalid_argument"


# 'name' or "name" after the word tensor, as the agents write it ("tensor 'embed.weight': ...").
_TENSOR_IN_TEXT = re.compile(r"""tensor ['"]([^'"]*)['"]""")


class ManifestMismatchError(InvalidArgumentError):
    """The tensors disagree with the declared manifest (or with a worker's bindings); ``.tensor`` names the first
    one that does, when it is known."""

    status = "manifest_mismatch"

    def __init__(self, detail: str = "", status: str | None = None, tensor: str | None = None):
        super().__init__(detail, status)
        if tensor is None:
            found = _TENSOR_IN_TEXT.search(detail)
            tensor = found.group(1) if found else None
        self.tensor = tensor


class UnavailableError(Error, ConnectionError):
    """No coordinator answered, registration failed, or the bus is in use."""

    status = "unavailable"


class BusyError(Error):
    """A version is still in flight: wait for its outcome first."""

    status = "busy"


class StoppedError(Error):
    """The handle was closed, or its agent stopped by itself."""

    status = "stopped"


class UnsupportedError(Error):
    """Not in this build (a GPU channel without CUDA) or not for this kind of object."""

    status = "unsupported"


class InternalError(Error):
    """A bug or an unexpected system failure (the text says which)."""

    status = "internal"


class AbortedError(Error):
    """The round started and ended without a commit. ``.outcome`` is the whole Outcome, ``.reason`` the
    AbortReason's name ("AgentDied", "AgentRefused", "DigestMismatch", ...). The C call itself succeeded: ``.status``
    is "aborted", the outcome's kind."""

    status = "aborted"

    def __init__(self, outcome: Outcome):
        text = f"version {outcome.version} aborted in round {outcome.round}: {outcome.reason}"
        if outcome.detail:
            text += f": {outcome.detail}"
        super().__init__(text)
        self.outcome = outcome
        self.reason = outcome.reason
        # The tensor a ManifestMismatch names, when the detail names one.
        found = _TENSOR_IN_TEXT.search(outcome.detail or "") if outcome.reason == "ManifestMismatch" else None
        self.tensor: str | None = found.group(1) if found else None


class RefusedError(Error):
    """The coordinator refused to start the round. ``.outcome`` is the whole Outcome, ``.refusal`` the ErrorCode's
    name ("VersionNotIncreasing", "RoundInProgress", ...); ``.status`` is "refused", the outcome's kind."""

    status = "refused"

    def __init__(self, outcome: Outcome):
        text = f"version {outcome.version} refused: {outcome.refusal}"
        if outcome.detail:
            text += f": {outcome.detail}"
        super().__init__(text)
        self.outcome = outcome
        self.refusal = outcome.refusal


# wsync_status values (wsync.h) -> exception classes.
_BY_STATUS = {
    1: TimeoutError,
    2: InvalidArgumentError,
    3: UnavailableError,
    4: ManifestMismatchError,
    5: BusyError,
    6: StoppedError,
    7: UnsupportedError,
    8: InternalError,
}


def error_for_status(status: int, detail: str, status_name: str | None = None) -> Error:
    """The exception for a C status and its text."""
    cls = _BY_STATUS.get(status, InternalError)
    if status_name is None:
        status_name = cls.status if status in _BY_STATUS else f"status {status}"
    return cls(detail or status_name, status_name)


class PauseWithdrawn(Error):
    """The bus withdrew a pause before the engine had quiesced for it: the round ended (aborted, say by the pause
    timeout a drain in "wait" mode ran past) or the operator's pause was lifted while the engine still drained.
    PauseGate.pause raises it once PauseGate.withdraw was called; a worker's on_pause that gives up on its own
    on_withdraw raises it too. The engine goes on generating, and the worker neither resumes it nor counts a
    refusal."""

    status = "withdrawn"
