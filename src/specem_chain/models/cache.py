"""Where built-in models are kept (``$SPECEM_CACHE``, else ``~/.cache/specem-chain``), the
cross-process lock that guards building them, and the progress bars shown meanwhile."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from .registry import BuiltinModel

MARKER = "specem.json"
"""Written last into a converted model's folder: the folder is complete when it holds it."""


def cache_dir() -> Path:
    """The cache root: ``$SPECEM_CACHE`` if set, else ``~/.cache/specem-chain``."""
    env = os.environ.get("SPECEM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specem-chain"


def gguf_file(model: BuiltinModel) -> Path:
    return cache_dir() / "gguf" / f"{model.name}.gguf"


def folder(model: BuiltinModel) -> Path:
    """The converted safetensors folder."""
    return cache_dir() / "models" / model.name


def wheels() -> Path:
    return cache_dir() / "wheels"


def is_complete(path: Path, model: BuiltinModel) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"name": model.name, "sha256": model.sha256}


def mark_complete(path: Path, model: BuiltinModel) -> None:
    (path / MARKER).write_text(json.dumps({"name": model.name, "sha256": model.sha256}))


@contextmanager
def locked(model: BuiltinModel) -> Iterator[None]:
    """Hold an exclusive per-model lock across processes (on every platform)."""
    path = cache_dir() / "locks" / f"{model.name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield


def clear_stale(directory: Path, prefix: str) -> None:
    """Remove leftovers of builds that crashed; call with the model's lock held."""
    if directory.is_dir():
        for path in directory.glob(f"{prefix}*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def progress(enabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )


def task(prog: Progress, description: str, total: float | None = None) -> TaskID:
    return prog.add_task(description, total=total, detail="")


def finish(prog: Progress, task_id: TaskID) -> None:
    prog.update(task_id, total=1, completed=1)
