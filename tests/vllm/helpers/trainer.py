"""A trainer process for the vLLM stage: the tiny Qwen3 in float32, publishing its versions over a wsync bus.

Commands arrive as JSON lines on stdin; every answer is one JSON line on stdout ({"event": ...}), and a failure is
{"event": "error", "type": ..., "message": ...} without ending the process, so a test can go on after a refused
round. Ops:
  init_info                        the workers' init info for this trainer's manifest (for vLLM's init)
  publish {version}                step the model to `version`, publish it over wsync, wait for its outcome
  init_http {url}                  WsyncSender.init through vLLM's HTTP client: every vLLM worker binds its staging
  sync {url, version, pause_mode}  step and publish, then vLLM's update over HTTP: WsyncSender.sync with vLLM's
                                   client (between the server's /pause?mode= and /resume when pause_mode is given)
  factory_init {url}               vLLM's own trainer side: WeightTransferTrainerFactory.trainer_init(...)
  factory_send {version}           step the model, then the factory's engine.send_weights()
  greedy {prompts, max_tokens}     this model's own greedy continuations (what vLLM must produce)
  step {version}                   step the model to `version` without publishing it
  digests                          SHA-256 of every tensor's bytes, by name
  publish_then_die {version}       publish `version` with its last tensor in memory that faults on any access:
                                   the agent's copy crashes this process (SIGSEGV) in the middle of the transfer
  extra_tensor / wrong_shape       publish a manifest vLLM's model does not fit (a tensor it lacks, a wrong shape)
Arguments: BUS CHANNEL SEED.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tiny_model
from worker_probes import parameter_digests

from wsync.vllm import WsyncSender

# mprotect(2)'s "no access at all".
PROT_NONE = 0
# vLLM's HTTP client waits this long for one call (an update_weights includes waiting for the version).
HTTP_TIMEOUT_S = 120.0


def say(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def http_client(url: str):
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient

    return HTTPVLLMWeightSyncClient(url, timeout=HTTP_TIMEOUT_S)


def http_post(url: str, path: str, params: dict | None = None) -> None:
    import requests

    response = requests.post(f"{url}{path}", params=params, timeout=HTTP_TIMEOUT_S)
    response.raise_for_status()


class Trainer:
    def __init__(self, bus: str, channel: str, seed: int) -> None:
        self.model = tiny_model.model(seed)
        self.version = 0
        self.sender = WsyncSender(bus, agent_id="trainer-0", channel=channel, pause_mode="keep")
        self.factory_engine = None

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(name, parameter.detach()) for name, parameter in self.model.named_parameters()]

    def step_to(self, version: int) -> None:
        for next_version in range(self.version + 1, version + 1):
            tiny_model.step(self.model, next_version)
        self.version = max(self.version, version)

    def init_info(self, **_) -> None:
        say("init_info", info=self.sender.init_info(self.tensors()))

    def publish(self, version: int, **_) -> None:
        self.step_to(version)
        outcome = self.sender.publish(self.tensors(), version)
        say("published", version=outcome.version)

    def init_http(self, url: str, **_) -> None:
        self.sender.init(http_client(url), self.tensors())
        say("initialized")

    def sync(self, url: str, version: int, pause_mode: str | None = None, **_) -> None:
        """WsyncSender.sync against vLLM's server; with `pause_mode`, between the server's /pause and /resume."""
        self.step_to(version)
        pause = resume = None
        if pause_mode is not None:
            self.sender.pause_mode = pause_mode

            def pause(mode: str) -> None:
                http_post(url, "/pause", params={"mode": mode})

            def resume() -> None:
                http_post(url, "/resume")

        served = self.sender.sync(http_client(url), self.tensors(), version, pause=pause, resume=resume)
        say("synced", version=served)

    def factory_init(self, url: str, **_) -> None:
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
        from vllm.plugins import load_general_plugins

        from wsync.vllm.engine import WsyncTrainerInitInfo

        # A trainer process is not one of vLLM's: nothing has loaded the plugins (and with them backend "wsync")
        # yet. vLLM's own loader does it, through the package's entry point.
        load_general_plugins()
        # The factory's engine has its own wsync Trainer: this one leaves the bus first.
        self.sender.close()
        info = WsyncTrainerInitInfo(self.sender.bus, rank=0, channel=self.sender.channel, agent_id="trainer-factory")
        self.factory_engine = WeightTransferTrainerFactory.trainer_init(
            info, client=http_client(url), source=ModuleSource(self.model)
        )
        say("factory_ready", engine=type(self.factory_engine).__name__)

    def factory_send(self, version: int, **_) -> None:
        self.step_to(version)
        self.factory_engine.send_weights(version)
        say("factory_sent", version=version)

    def step(self, version: int, **_) -> None:
        self.step_to(version)
        say("stepped", version=self.version)

    def digests(self, **_) -> None:
        say("digests", digests=parameter_digests(self.model))

    def publish_then_die(self, version: int, **_) -> None:
        """Publishes `version` with its last tensor's bytes in pages that fault on any access. The agent sends the
        tensors in manifest order, so its I/O thread crashes the process once the transfer is under way and before
        the last bytes go: a trainer dead mid-transfer, at that point every time (a kill timed from here races a
        transfer of a few MiB, which may have committed before the signal)."""
        self.step_to(version)
        tensors = self.tensors()
        name, last = tensors[-1]
        self.trap = mmap.mmap(-1, last.numel() * last.element_size())
        trapped = torch.frombuffer(self.trap, dtype=last.dtype).view(last.shape)
        trapped.copy_(last)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mprotect(ctypes.c_void_p(trapped.data_ptr()), ctypes.c_size_t(len(self.trap)), PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of the trapped tensor failed")
        self.sender.trainer.publish(version, [*tensors[:-1], (name, trapped)], pause_mode="keep")
        say("publishing", version=version, trapped=name)

    def greedy(self, prompts: list[list[int]], max_tokens: int, **_) -> None:
        say("greedy", tokens=tiny_model.greedy(self.model, prompts, max_tokens))

    def extra_tensor(self, version: int, **_) -> None:
        tensors = [*self.tensors(), ("model.layers.0.mlp.not_in_vllm.weight", torch.zeros(4, 4))]
        outcome = self.sender.publish(tensors, version)
        say("published", version=outcome.version)

    def wrong_shape(self, version: int, **_) -> None:
        tensors = self.tensors()
        name, tensor = tensors[1]
        tensors[1] = (name, torch.zeros(tensor.shape[0] + 1, *tensor.shape[1:]))
        outcome = self.sender.publish(tensors, version)
        say("published", version=outcome.version)


def main() -> None:
    bus, channel, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    trainer = Trainer(bus, channel, seed)
    say("ready", manifest=len(trainer.tensors()))
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            getattr(trainer, op)(**command)
        except Exception as error:  # noqa: BLE001 - every failure is an answer; the test decides
            say("error", op=op, type=type(error).__name__, message=str(error), trace=traceback.format_exc()[-2000:])
    if trainer.factory_engine is not None:
        trainer.factory_engine.shutdown()
    else:
        trainer.sender.close()


if __name__ == "__main__":
    main()
