"""Reading what the worker helpers dumped (helpers/worker.py --dump-dir)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path


def read_dumps(folder: Path, worker: str) -> list[dict]:
    """The worker's dumps in the order it wrote them: [{version, bytes: {name: bytes}}, ...]."""
    return [pickle.loads(path.read_bytes()) for path in sorted(Path(folder).glob(f"{worker}-*.pkl"))]


def check_dumps(folder: Path, worker: str, expected: Callable[[int], dict[str, bytes]], last_version: int) -> int:
    """Every dump holds exactly the bytes of the version it was tagged with, and the last one `last_version`;
    returns how many were checked."""
    dumps = read_dumps(folder, worker)
    assert dumps, f"{worker} dumped nothing in {folder}"
    cache: dict[int, dict[str, bytes]] = {}
    for index, dump in enumerate(dumps):
        version = dump["version"]
        if version not in cache:
            cache[version] = expected(version)
        want = cache[version]
        assert sorted(dump["bytes"]) == sorted(want), f"{worker} dump {index}: tensor names differ"
        for name, data in want.items():
            assert dump["bytes"][name] == data, f"{worker} dump {index} (version {version}): tensor '{name}' differs"
    assert dumps[-1]["version"] == last_version, f"{worker}'s last dump holds version {dumps[-1]['version']}"
    return len(dumps)
