"""Which version produced which tokens of one output (worker_agent/span_recorder.hpp's semantics)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SpanRecorder", "check_spans"]


class SpanRecorder:
    """One per output, written by the thread that generates it: ``record(token_index, worker.applied_version)``
    for every token; a new span starts only when the version differs from the last one recorded."""

    __slots__ = ("spans", "_last")

    def __init__(self):
        self.spans: list[tuple[int, int]] = []  # [(first token index, version), ...]
        self._last: int | None = None

    def record(self, token_index: int, version: int) -> None:
        if version != self._last:
            self.spans.append((token_index, version))
            self._last = version

    def clear(self) -> None:
        self.spans.clear()
        self._last = None

    def __repr__(self) -> str:
        return f"SpanRecorder({self.spans})"


def check_spans(spans: SpanRecorder | Iterable[tuple[int, int]], token_count: int | None = None) -> None:
    """Raises ValueError naming the offending span unless the spans can describe an output: the first starts at
    token 0, first-token indices strictly increase, versions never decrease, and (with `token_count`) every span
    starts before the last token. No spans is consistent (an output that ended before its first token)."""
    entries = list(spans.spans if isinstance(spans, SpanRecorder) else spans)

    def describe(index: int) -> str:
        return f"span {index} (token {entries[index][0]}, version {entries[index][1]})"

    for index, (first, version) in enumerate(entries):
        if index == 0 and first != 0:
            raise ValueError(f"first span does not start at token 0: {describe(index)}")
        if index > 0 and first <= entries[index - 1][0]:
            raise ValueError(f"span starts are not increasing: {describe(index)} after {describe(index - 1)}")
        if index > 0 and version < entries[index - 1][1]:
            raise ValueError(f"versions decrease: {describe(index)} after {describe(index - 1)}")
        if token_count is not None and first >= token_count:
            raise ValueError(f"span starts past the last token: {describe(index)} in an output of {token_count} tokens")
