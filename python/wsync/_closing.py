"""What every handle of the package shares: closed by `with`, and when collected."""

from __future__ import annotations


class Closing:
    """A handle its owner closes with close(); a context manager, and closed when garbage-collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter shutdown the modules it needs may be gone
            pass
