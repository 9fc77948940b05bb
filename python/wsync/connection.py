"""How a client reaches a bus: one value that Trainer, Worker, status(), events() and the vLLM adapter all take
(wsync_connection in the C API).

It imports only errors.py, which imports nothing of it: no import circle runs through it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InvalidArgumentError

__all__ = ["Connection"]


@dataclass(frozen=True)
class Connection:
    """A bus and the way to it. On the coordinator's host the bus's name is enough (pass the name itself wherever
    a Connection is taken); an agent on another host names the coordinator's tcp endpoint, and on a bus with CURVE
    its own key pair and the coordinator's public key (docs/hosts.md, docs/security.md)::

        remote = wsync.Connection("rl", transport="tcp://head:5555", curve_keys="worker-0.keys",
                                  server_key="coordinator.pub")
        worker = wsync.Worker(remote, tensors=model.named_parameters())
    """

    bus: str
    transport: str | None = None  # None or "ipc": this host; "tcp://HOST:PORT": the coordinator's tcp endpoint
    curve_keys: str | os.PathLike[str] | None = None  # tcp with CURVE: this client's key-pair file (wsync-keygen)
    server_key: str | os.PathLike[str] | None = None  # tcp with CURVE: the coordinator's public key (Z85) or its file

    def __post_init__(self) -> None:
        if not isinstance(self.bus, str) or not self.bus:
            raise InvalidArgumentError(f"a bus name is required, not {self.bus!r}")

    @classmethod
    def of(cls, bus: str | Connection) -> Connection:
        """`bus` as a Connection: itself, or a bus on this host when it is a name."""
        if isinstance(bus, Connection):
            return bus
        if isinstance(bus, str):
            return cls(bus)
        raise TypeError(f"expected a bus name or a wsync.Connection, got {type(bus).__name__}")
