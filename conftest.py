"""What every test of the repository shares, the adapters' included: no hub, the helpers in
tests/ and the examples on the import path, tiny random models built offline, and loaded
models released after each test module, so that a run holds only the models its current
module uses."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from postgres_server import PostgresServer

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"  # nothing leaves the machine in a test
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]

# Tests never assert timings: Hypothesis's 200 ms deadline per example fails property tests
# on a loaded 2-core machine (seen: 289 ms for a JSON-prefix check beside two evals).
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")


@pytest.fixture(scope="module", autouse=True)
def release_models() -> Iterator[None]:
    """Each module's loaded members are freed when it ends (the backends' registry keeps
    every model it loads until released)."""
    yield
    from specem_chain.backends import release

    release()
    gc.collect()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders of tiny random models: "llama", "qwen2", "plain" (no chat template),
    "nosystem" (a template that rejects a system turn) and "tools" (a template that writes
    tools); and "gguf", a "llama" model as a GGUF file (beside its folder)."""
    from tiny_models import NO_SYSTEM_TEMPLATE, TOOLS_TEMPLATE, build_gguf, build_model

    root = tmp_path_factory.mktemp("tiny")
    return {
        "llama": build_model(root / "llama", "llama"),
        "gguf": build_gguf(build_model(root / "gguf", "llama")),
        "qwen2": build_model(root / "qwen2", "qwen2"),
        "plain": build_model(root / "plain", "llama", chat_template=None),
        "nosystem": build_model(root / "nosystem", "qwen2", chat_template=NO_SYSTEM_TEMPLATE),
        "tools": build_model(root / "tools", "qwen2", chat_template=TOOLS_TEMPLATE),
    }


def running_postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (``tests/postgres_server.py``) until the generator ends;
    the test is skipped, with the reason, where PostgreSQL is not installed."""
    from postgres_server import PostgresServer, missing

    why = missing()
    if why is not None:
        pytest.skip(why)
    with PostgresServer.running() as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole run."""
    yield from running_postgres()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """A new empty database on the run's PostgreSQL server: its URL (with a password)."""
    return postgres.new_database()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, which it may kill and start again."""
    yield from running_postgres()
