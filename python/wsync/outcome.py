"""How a version's round ended: the Outcome a trainer's publish gives, and its kind.

A leaf of the package: errors.py (AbortedError, RefusedError) and trainer.py both import it; it imports nothing
of theirs, so no import circle runs through it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Outcome", "OutcomeKind"]


class OutcomeKind(str, enum.Enum):
    """How a round ended (wsync_outcome_kind). A str: ``outcome.kind == "committed"`` holds, and ``str()``,
    f-strings and json.dumps give the bare name (as Python 3.11's StrEnum does, on 3.10 too)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    """How a version's round ended."""

    version: int
    kind: OutcomeKind
    reason: str | None  # the AbortReason's name when aborted ("AgentDied", "DigestMismatch", ...)
    refusal: str | None  # the ErrorCode's name when refused ("VersionNotIncreasing", ...)
    detail: str
    round: int
    bytes: int
    digest: tuple[int, int]  # XXH3-128 of the payload: (lo, hi)
    until_plan: float  # seconds: begin -> transfer plan (the workers' pause included)
    sending: float  # seconds: the payload through the channel
    total: float  # seconds: begin -> outcome

    @property
    def committed(self) -> bool:
        return self.kind is OutcomeKind.COMMITTED
