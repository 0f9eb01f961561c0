"""The resumable runner: one JSONL line per (system, example), appended as each finishes.

A restarted run reads the file and skips what is there, so a killed run loses at most the
answer it was writing. The members' solo answers are stored like any system's and are what
the baselines (rank, MBR, vote) choose from.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from ..backends import forget_prompts
from ..errors import SpecEMError
from . import tasks
from .systems import Output, System

RESULTS = "results.jsonl"
ROUNDS = "rounds.jsonl"
"""Each ensemble answer's rounds as the policy saw them (for ``specem replay``), kept apart
from the results, which stay small."""
MANIFEST = "run.json"


class ResumeError(SpecEMError):
    """The output folder holds results made with other settings."""


class ResultStore:
    """``results.jsonl``: finished results keyed by (system, example id)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):  # killed while writing: drop the partial line
            data = data[: data.rfind(b"\n") + 1]
            with self.path.open("r+b") as file:
                file.truncate(len(data))
        for line in data.decode("utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                self.records[record["system"], record["id"]] = record

    def get(self, system: str, example_id: str) -> dict[str, Any] | None:
        return self.records.get((system, example_id))

    def add(self, record: dict[str, Any]) -> None:
        """Store a result; its rounds (``details["rounds"]``) go to :data:`ROUNDS`, first,
        so a stored result always has its rounds."""
        details = record.get("details", {})
        rounds = details.pop("rounds", None)
        if rounds is not None:
            entry = {
                "system": record["system"],
                "id": record["id"],
                "start_weights": details.get("start_weights"),
                "rounds": rounds,
            }
            _append(self.path.with_name(ROUNDS), entry)
        _append(self.path, record)
        self.records[record["system"], record["id"]] = record


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record, ensure_ascii=False) + "\n")
        file.flush()
        os.fsync(file.fileno())


def ordered(examples: Sequence[tasks.Example], order: str) -> list[tasks.Example]:
    """The examples in the run's order: ``stored`` or ``shuffle:N``."""
    kind, _, seed = order.partition(":")
    if kind == "stored" and not seed:
        return list(examples)
    if kind == "shuffle" and seed.isdigit():
        shuffled = list(examples)
        random.Random(int(seed)).shuffle(shuffled)
        return shuffled
    raise ValueError(f"--order must be 'stored' or 'shuffle:N' (N a number), not {order!r}")


def open_store(
    out: Path, manifest: dict[str, Any], recipes: Mapping[str, Mapping[str, Any]]
) -> ResultStore:
    """The store in ``out``, checking that earlier results were made with ``manifest`` and
    that each system's stored answers were made with its recipe (``recipes``, by name:
    :attr:`~specem_chain.evaluation.systems.System.recipe`). The manifest keeps every
    system's recipe under ``"systems"``; a system new to the folder adds its own."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    store = ResultStore(out / RESULTS)
    before = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    known: dict[str, Any] = before.pop("systems", {})
    if before and before != manifest:
        raise ResumeError(
            f"{out} holds results made with other settings ({_differ(before, manifest)} "
            "differ); choose another --out or delete it"
        )
    answered = {system for system, _ in store.records}
    recipes = json.loads(json.dumps(recipes))  # as run.json will hold them
    for name, recipe in recipes.items():
        if name in known and known[name] != recipe:
            raise ResumeError(
                f"{out} holds answers of {name} made with other settings "
                f"({_differ(known[name], recipe)} differ; a default may have changed since); "
                "name the settings they were made with, choose another --out or delete it"
            )
        if name not in known and name in answered:
            raise ResumeError(
                f"{out} holds answers of {name} but not the settings they were made with "
                f"(its {MANIFEST} has no systems.{name}); choose another --out or delete it"
            )
    merged = {**manifest, "systems": {**known, **recipes}}
    if merged != {**before, "systems": known}:
        path.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    return store


def _differ(before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    return ", ".join(sorted(k for k in {*before, *now} if before.get(k) != now.get(k)))


def read_run(folder: Path) -> tuple[dict[str, Any], ResultStore]:
    """The manifest and the results that ``specem eval`` stored in ``folder``."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    return manifest, ResultStore(folder / RESULTS)


class ThroughputColumn(ProgressColumn):
    """Results per minute."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{60 * speed:.2f}/min" if speed else "-/min", style="progress.data.speed")


async def run(
    task: tasks.Task,
    examples: Sequence[tasks.Example],
    systems: Sequence[System],
    member_systems: Sequence[System],
    store: ResultStore,
    console: Console | None = None,
) -> None:
    """Answer and score every example with every system, skipping stored results.

    ``member_systems`` (one per member, in member order) give the solo answers that the
    systems with ``needs_solos`` choose from; they run first where those are missing.
    """
    plan = [(example, _pending(example, systems, member_systems, store)) for example in examples]
    for system in systems:  # a system that carries weights across examples takes them back
        if resume := getattr(system, "resume", None):
            done = [store.get(system.name, e.id) for e in examples]
            resume(next((r for r in reversed(done) if r is not None), None))
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        ThroughputColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        speed_estimate_period=24 * 3600,  # one result may take minutes
    )
    with progress:
        bar = progress.add_task("eval", total=sum(len(p) for _, p in plan))
        for example, pending in plan:
            for system in pending:
                progress.update(bar, description=f"{system.name} #{example.id}")
                solos = _solos(example, member_systems, store) if system.needs_solos else {}
                forget_prompts()  # each answer reads its prompt: the systems' seconds compare
                start = time.perf_counter()
                output = await system.answer(example, solos)
                store.add(_record(task, example, system.name, output, start))
                progress.advance(bar)
        progress.update(bar, description="eval")


def _pending(
    example: tasks.Example,
    systems: Sequence[System],
    member_systems: Sequence[System],
    store: ResultStore,
) -> list[System]:
    pending = [s for s in systems if store.get(s.name, example.id) is None]
    if any(s.needs_solos for s in pending):
        solos = [s for s in member_systems if store.get(s.name, example.id) is None]
        names = {s.name for s in solos}
        pending = solos + [s for s in pending if s.name not in names]
    return pending


def _solos(
    example: tasks.Example, member_systems: Sequence[System], store: ResultStore
) -> dict[str, Output]:
    solos = {}
    for system in member_systems:
        record = store.get(system.name, example.id)
        assert record is not None, "member systems run before the systems that need them"
        solos[system.name.removeprefix("member:")] = Output(record["text"], record["finished"])
    return solos


def _record(
    task: tasks.Task, example: tasks.Example, system: str, output: Output, start: float
) -> dict[str, Any]:
    return {
        "system": system,
        "id": example.id,
        "text": output.text,
        "finished": output.finished,
        "metrics": task.score(example, output.text),
        "seconds": round(time.perf_counter() - start, 3),
        "details": output.details,
    }
