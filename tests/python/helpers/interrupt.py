"""Blocks in one of wsync's waits until SIGINT: the test checks that Ctrl-C ends it promptly with
KeyboardInterrupt. Modes: wait_for_version, publish_wait, events, status_worker."""

from __future__ import annotations

import sys
import threading
import time

import wsync


def main() -> int:
    mode, bus = sys.argv[1], sys.argv[2]
    release = threading.Event()
    coordinator = wsync.Coordinator(bus, in_process=True)
    arrays = {"w": bytearray(64)}

    def stuck_pause(mode_name, round_):
        while not release.is_set():  # an engine that never quiesces, until the test is over
            time.sleep(0.01)
        raise RuntimeError("released")

    worker = wsync.Worker(bus, agent_id="w", tensors=arrays, on_pause=stuck_pause if mode == "publish_wait" else None)
    trainer = wsync.Trainer(bus, agent_id="t") if mode == "publish_wait" else None
    started = time.monotonic()
    try:
        if mode == "wait_for_version":
            print("waiting", flush=True)
            worker.wait_for_version(1000)
        elif mode == "publish_wait":
            handle = trainer.publish(1, {"w": bytearray(64)})
            print("waiting", flush=True)
            handle.wait()
        elif mode == "events":
            stream = wsync.events(bus)
            print("waiting", flush=True)
            for event in stream:
                if event.get("type") == "Never":
                    break
        print("the wait returned", flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"KeyboardInterrupt after {time.monotonic() - started:.2f} s", flush=True)
        raise
    finally:
        release.set()
        if trainer is not None:
            trainer.close()
        worker.close()
        coordinator.stop()


if __name__ == "__main__":
    sys.exit(main())
