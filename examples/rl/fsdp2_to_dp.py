#!/usr/bin/env python3
"""An FSDP2 trainer updating data-parallel inference workers through wsync (vLLM's EP/DP weight-sync example):
the trainer's ranks hold the policy sharded with PyTorch FSDP2 (`fully_shard`); for each version every rank
publishes its own shards (its DTensors as they are: no gather, docs/regions.md), and the version commits once every
rank has sent; each inference worker, a process of its own, holds a full copy and takes every version.
`--publish gathered` does what frameworks did before: every rank gathers the full tensors (DTensor.full_tensor(),
a collective) and rank 0 publishes them, the baseline the shards are measured against.

    python examples/rl/fsdp2_to_dp.py --model qwen3-small --trainer-devices cuda:0,cuda:1 \\
        --engine-devices cuda:2,cuda:3 --channel nccl                   # 4 GPUs
    python examples/rl/fsdp2_to_dp.py --model qwen3-small --trainer-devices cuda:0,cuda:1 \\
        --engine-devices cuda:0,cuda:1 --channel cuda_ipc               # 2 GPUs: workers beside the ranks
    python examples/rl/fsdp2_to_dp.py                                   # CPU: gloo ranks, shm (torch >= 2.6)

The trainer's ranks are `RankServer` below (rank 0 holds the wsync.Trainer), each engine is `run_engine()` with
its wsync.Worker, every one a process of its own.

Checks (exit code 1 if any fails): every worker holds each version byte for byte as gathered; every worker's greedy
outputs equal the unsharded trainer model's (rank 0 loads the gathered tensors into a plain model and generates
through the same engine code), token for token, before and after the FSDP2 training steps; the update changed them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from typing import Any

import policy_models
import scenario_support as S
import torch
from reference_engine import ReferenceEngine, deterministic

import wsync

VERSIONS = (1, 2)


def fully_shard_function():
    """FSDP2's fully_shard, or None where this torch has none (before 2.4; 1.13 even fails to import it on 3.11)."""
    for module in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            return __import__(module, fromlist=["fully_shard"]).fully_shard
        except Exception:  # noqa: BLE001 - ImportError, AttributeError, or a failing import
            continue
    return None


class TrainerGroup:
    """The FSDP2 ranks, a process each, driven in lockstep: every command goes to every rank (collectives need all
    of them); rank 0's answer is returned."""

    def __init__(self, bus, model, seed, devices: list[str], channel, backend, init_file, publish):
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        settings = (channel, backend, init_file, publish)
        for rank, device in enumerate(devices):
            parent, child = context.Pipe()
            process = context.Process(
                target=S.serve,
                args=(child, RankServer, rank, len(devices), bus, model, seed, device, *settings),
                name=f"trainer-rank{rank}",
                daemon=True,
            )
            process.start()
            child.close()
            self.connections.append(parent)
            self.processes.append(process)
        self._collect()

    def call(self, command: str, *args, timeout: float = S.COMMAND_TIMEOUT_SECONDS) -> Any:
        for connection in self.connections:
            connection.send((command, args))
        return self._collect(timeout)

    def _collect(self, timeout: float = S.COMMAND_TIMEOUT_SECONDS) -> Any:
        answers = [
            S.answer_of(connection, timeout, f"trainer rank {rank}") for rank, connection in enumerate(self.connections)
        ]
        return answers[0]

    def close(self) -> None:
        S.stop_processes(zip(self.processes, self.connections))  # all at once: each rank's stop waits for the others


class RankServer:
    """One FSDP2 rank: its shards of the policy and its wsync.Trainer (publishing its shards), or, gathering, rank 0
    alone holds one; rank 0 keeps the last gathered tensors for the checks."""

    def __init__(self, rank, world, bus, model_name, seed, device, channel, backend, init_file, publish):
        deterministic()
        if torch.device(device).type == "cuda":
            torch.cuda.set_device(torch.device(device))
        torch.distributed.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard = fully_shard_function()
        # The ranks' own device type, said explicitly: FSDP2's default mesh is on CUDA wherever CUDA is present.
        mesh = init_device_mesh(torch.device(device).type, (world,))
        # Every rank starts from the same full weights (as from a checkpoint), then keeps only its shards.
        self.model = policy_models.build(model_name, seed, device)
        for layer in self.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        self.rank, self.model_name, self.device, self.publish = rank, model_name, device, publish
        self.trainer = (
            wsync.Trainer(bus, agent_id=f"trainer-{rank}", channel=channel, cuda_device=S.device_index(device))
            if rank == 0 or publish == "shards"
            else None
        )
        self.full = {}

    def handle(self, command: str, args):
        if command == "train":  # every rank, each on data of its own
            steps, train_seed = args
            return policy_models.train_steps(self.model, steps, train_seed + self.rank)
        if command == "publish":
            version, pause_mode = args
            started = time.monotonic()
            if self.publish == "shards":
                # Every rank its own shards, at once: the version commits when all have sent.
                outcome = self.trainer.publish(version, self.model.named_parameters(), pause_mode=pause_mode)
                outcome = outcome.wait(S.COMMAND_TIMEOUT_SECONDS)
                published_s, gather_s = time.monotonic() - started, 0.0
                # Gathered only for the checks below, after the version committed and outside its time.
                gathered = {name: parameter.full_tensor() for name, parameter in self.model.named_parameters()}
            else:  # every rank gathers; rank 0 publishes the full tensors
                gathered = {name: parameter.full_tensor() for name, parameter in self.model.named_parameters()}
                gather_s = time.monotonic() - started
                outcome = None
                if self.rank == 0:
                    outcome = self.trainer.publish(version, gathered, pause_mode=pause_mode)
                    outcome = outcome.wait(S.COMMAND_TIMEOUT_SECONDS)
                published_s = time.monotonic() - started
            if self.rank != 0:
                return None
            self.full = gathered
            return {
                **S.outcome_record(outcome),
                "gather_s": gather_s,
                # From the step's end to the version committed: the gather and the publish, or the shards' publish.
                "update_s": published_s,
                "digests": policy_models.digests(self.full.items()),
                "sharded": type(next(self.model.parameters())).__name__,
            }
        if command == "generate":  # rank 0: the gathered tensors in a plain, unsharded model
            if self.rank != 0:
                return None
            prompts, max_tokens = args
            plain = policy_models.build(self.model_name, S.ENGINE_SEED, self.device)
            with torch.no_grad():
                for name, parameter in plain.named_parameters():
                    parameter.copy_(self.full[name])
            with ReferenceEngine(plain, self.device) as engine:
                return [request.tokens for request in engine.generate(prompts, max_tokens)]
        raise ValueError(f"unknown command '{command}'")

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
        torch.distributed.destroy_process_group()


def run_engine(link: S.Link, bus: str, model_name: str, device: str, agent_id: str, prompts, max_tokens) -> None:
    """One data-parallel inference worker: a full copy of the model, bound in place to a wsync.Worker; for each
    version, its weights' digests and its outputs with their spans."""
    S.use_device(device)
    model = policy_models.build(model_name, S.ENGINE_SEED, device)  # other weights than the trainer's
    with (
        ReferenceEngine(model, device, version=lambda: worker.applied_version) as engine,
        wsync.Worker(
            bus,
            agent_id=agent_id,
            tensors=model.named_parameters(),
            on_pause=engine.pause,
            on_resume=engine.resume,
            on_withdraw=engine.withdraw,
            cuda_device=S.device_index(device),
        ) as worker,
    ):
        link.send("ready")
        for version in VERSIONS:
            worker.wait_for_version(version, timeout=S.COMMAND_TIMEOUT_SECONDS)  # applied at the commit
            requests = engine.generate(prompts, max_tokens)
            link.send(
                {
                    "digests": policy_models.digests(model.named_parameters()),
                    "outputs": [(list(request.tokens), list(request.spans.spans)) for request in requests],
                }
            )
        link.receive()  # until the driver is done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", choices=sorted(policy_models.MODELS))
    parser.add_argument("--channel", default="shm", choices=["shm", "tcp", "nccl", "cuda_ipc"])
    parser.add_argument("--trainer-devices", default="cpu,cpu", help="one device per FSDP2 rank")
    parser.add_argument("--engine-devices", default="cpu,cpu", help="one device per inference worker")
    parser.add_argument("--backend", help="torch.distributed backend (default: nccl on GPUs, gloo on the CPU)")
    parser.add_argument(
        "--publish",
        default="shards",
        choices=["shards", "gathered"],
        help="every rank its shards (default), or rank 0 the full tensors every rank gathered (the baseline)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--json")
    parser.add_argument("--bus")
    arguments = parser.parse_args()
    report = S.Report("fsdp2_to_dp", arguments)
    if fully_shard_function() is None:
        report.say(f"torch {torch.__version__} has no FSDP2 (fully_shard): torch >= 2.6 is needed")
        raise SystemExit(2)
    trainer_devices = arguments.trainer_devices.split(",")
    engine_devices = arguments.engine_devices.split(",")
    backend = arguments.backend or ("nccl" if torch.device(trainer_devices[0]).type == "cuda" else "gloo")
    bus = arguments.bus or S.unique_bus("fsdp2-dp")
    vocab = policy_models.config_for(arguments.model).vocab_size
    prompts = policy_models.prompts(arguments.prompts, vocab, seed=arguments.seed + 300)
    report.say(
        f"{len(trainer_devices)} FSDP2 ranks on {trainer_devices} ({backend}), {len(engine_devices)} "
        f"inference workers on {engine_devices}, channel {arguments.channel}"
    )

    engines, group = [], None
    with wsync.Coordinator(bus), tempfile.TemporaryDirectory() as workdir:
        try:
            engines = [
                S.Peer(
                    run_engine,
                    bus,
                    arguments.model,
                    device,
                    f"engine-{index}",
                    prompts,
                    arguments.max_tokens,
                    name=f"engine-{index}",
                )
                for index, device in enumerate(engine_devices)
            ]
            for engine in engines:
                engine.receive()  # "ready": on the bus before the first round begins
            group = TrainerGroup(
                bus,
                arguments.model,
                arguments.seed,
                trainer_devices,
                arguments.channel,
                backend,
                os.path.join(workdir, "rendezvous"),
                arguments.publish,
            )
            before = None
            for version in VERSIONS:
                if version == 2:
                    losses = group.call("train", arguments.train_steps, arguments.seed + 1)
                    report.say(f"rank 0 trained {arguments.train_steps} FSDP2 steps: losses {losses}")
                outcome = group.call("publish", version, "wait")
                how = (
                    f"{len(trainer_devices)} ranks published their {outcome['sharded']} shards"
                    if arguments.publish == "shards"
                    else f"gathered in {outcome['gather_s'] * 1000:.1f} ms from {outcome['sharded']} shards"
                )
                report.say(f"{how}; updated in {outcome['update_s'] * 1000:.1f} ms; {S.describe_outcome(outcome)}")
                report.check(f"version {version} committed", outcome["kind"] == "committed", outcome["detail"])
                report.timing(
                    f"v{version}", {key: outcome[key] for key in ("total_s", "gather_s", "update_s", "bytes")}
                )
                served = [engine.receive() for engine in engines]
                for engine, answer in zip(engines, served):
                    report.same_weights(
                        f"{engine.name} holds version {version} byte for byte", answer["digests"], outcome["digests"]
                    )
                expected = group.call("generate", prompts, arguments.max_tokens)
                for engine, answer in zip(engines, served):
                    answers = answer["outputs"]
                    report.same_tokens(
                        f"version {version}: {engine.name}'s outputs equal the unsharded trainer model's",
                        [tokens for tokens, _ in answers],
                        expected,
                    )
                    report.check(
                        f"version {version}: {engine.name} tags every token with it",
                        all(spans == [(0, version)] for _, spans in answers),
                        f"spans: {sorted({tuple(spans) for _, spans in answers})}",
                    )
                if before is not None:
                    report.check(
                        "the update changed the outputs",
                        expected != before,
                        "version 2 generates exactly what version 1 did: the checks prove nothing",
                    )
                before = expected
        finally:
            if group is not None:
                group.close()
            for engine in engines:
                engine.close()
    S.exit_with(report)


if __name__ == "__main__":
    main()
