"""Member configuration: where a member's model comes from, its role and its sampling."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from .engine.types import Sampling
from .errors import MemberSpecError

__all__ = [
    "BackendName",
    "DType",
    "Kind",
    "Member",
    "ModelFiles",
    "Role",
    "Sampling",
    "ensemble_name",
    "member_list",
    "model_files",
]

Role = Literal["both", "drafter", "verifier"]
DType = Literal["float32", "bfloat16", "float16"]
Kind = Literal["local", "tgi", "vllm", "openai"]
"""Where a member runs: in this process, on a TGI server, on a vLLM server, or on another
OpenAI-style completions server (llama-cpp-python)."""
BackendName = Literal["auto", "transformers", "llamacpp"]
"""Which in-process backend a local member runs on."""

SPEC_PREFIXES: dict[str, Kind] = {"tgi+": "tgi", "vllm+": "vllm", "openai+": "openai"}

SESSION_HEADER = "X-Session-ID"
"""The session header a remote member sends by default (:attr:`Member.session_header`),
which a router's session affinity names (vLLM production-stack's router:
``--routing-logic session --session-key X-Session-ID``; nginx: ``hash $http_x_session_id
consistent``)."""
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header's name (RFC 9110's token)."""
CLIENT_HEADERS = frozenset(
    {"accept", "authorization", "connection", "content-length", "content-type", "host"}
)
"""Headers the member's client sets itself, which a session header may not replace."""


class Member(BaseModel):
    """One member of the ensemble.

    For a local member (``kind="local"``), ``source`` is a built-in name (see ``specem models
    list``), a local model folder, a GGUF file, or a Hugging Face hub model id. For a remote
    member it is the server's URL. A spec string names the kind in front of the URL:
    ``tgi+http://host:8080``, ``vllm+http://host:8000`` (``#served-model-name`` when the
    server serves several) or ``openai+http://host:8000/v1#served-model-name``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1)
    kind: Kind = "local"
    name: str | None = Field(None, description="Display name; derived from source if unset.")
    role: Role = "both"
    sampling: Sampling = Sampling()
    device: str = Field("cpu", description='A torch device, e.g. "cpu", "cuda:1".')
    dtype: DType = "float32"
    backend: BackendName = Field(
        "auto",
        description="local: run with llama.cpp from the GGUF (a built-in model or a .gguf "
        "source; needs the llamacpp extra) or with transformers; auto: llama.cpp for a GGUF "
        "on the CPU when the extra is installed, else transformers.",
    )
    batching: bool = Field(
        False,
        description="llama.cpp: read the draft and verification steps of concurrent "
        "requests in one batch (faster under load; an answer may then differ slightly "
        "from the same answer made alone).",
    )
    model: str | None = Field(
        None,
        description="vllm, openai: the served model name (default: the server's first model).",
    )
    tokenizer: str | None = Field(
        None,
        description="openai: a local model folder or .gguf whose chat template renders the "
        "conversation (needs the local extra).",
    )
    chat_template: str | None = Field(
        None, description="openai: a Jinja chat template, rendered without the local extra."
    )
    api_key: SecretStr | None = Field(
        None,
        description="Bearer token for the server; unset: the environment's "
        "SPECEM_API_KEY_<NAME> or SPECEM_API_KEY (see api_key_env).",
    )
    request_timeout: float = Field(
        60.0, gt=0, description="Seconds one request to the member's server may take."
    )
    retries: int = Field(
        2, ge=0, le=10, description="Retries of a request after connection errors and 5xx."
    )
    session_header: str | None = Field(
        SESSION_HEADER,
        description="A remote member: the header every request of one answer carries, with "
        "the answer's id (Answer.id), so that a router with session affinity in front of "
        "several replicas of the member's server keeps the answer on one, which reads its "
        "context once; None: none (for a server that refuses headers it does not know).",
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_from_spec(cls, data: Any) -> Any:
        """``source="tgi+URL"``, ``"vllm+URL#model"`` or ``"openai+URL#model"`` sets the kind
        (and the model)."""
        if not isinstance(data, dict) or not isinstance(data.get("source"), str):
            return data
        for prefix, kind in SPEC_PREFIXES.items():
            if data["source"].startswith(prefix):
                url, _, model = data["source"][len(prefix) :].partition("#")
                data = {**data, "source": url, "kind": kind}
                if model:
                    data.setdefault("model", model)
        return data

    @model_validator(mode="after")
    def _remote_source_is_url(self) -> Member:
        if self.remote:
            parts = urlsplit(self.source)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"a {self.kind} member's source must be an http(s) URL, got {self.source!r}"
                )
        elif self.model or self.tokenizer or self.chat_template:
            raise ValueError("model, tokenizer and chat_template apply to remote members only")
        if self.kind in ("tgi", "vllm") and (self.tokenizer or self.chat_template):
            raise ValueError(
                f"a {self.kind} member renders the conversation with its server's own chat "
                "template; tokenizer and chat_template apply to openai members only"
            )
        header = self.session_header
        if header is not None and (
            not HEADER_NAME.match(header) or header.lower() in CLIENT_HEADERS
        ):
            raise ValueError(
                f"session_header must be an HTTP header's name (letters, digits, '-') other "
                f"than {sorted(CLIENT_HEADERS)}, or None for none; got {header!r}"
            )
        if self.batching and (self.remote or self.backend == "transformers"):
            where = f"a {self.kind} member" if self.remote else "backend='transformers'"
            raise ValueError(f"batching applies to members on llama.cpp, not to {where}")
        return self

    @property
    def api_key_env(self) -> str:
        """The environment variable a remote member's ``api_key`` falls back to:
        ``SPECEM_API_KEY_<NAME>`` (its name in capitals, other characters as ``_``)."""
        return "SPECEM_API_KEY_" + re.sub(r"[^A-Za-z0-9]", "_", self.label).upper()

    def key(self) -> str | None:
        """The bearer token for the member's server: ``api_key``, else the environment's
        :attr:`api_key_env`, else ``SPECEM_API_KEY``; None without one."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get(self.api_key_env) or os.environ.get("SPECEM_API_KEY") or None

    @classmethod
    def local(cls, source: str, **settings: object) -> Member:
        """A member that runs in this process (see ``backend``)."""
        return cls(source=source, **settings)

    @classmethod
    def tgi(cls, url: str, **settings: object) -> Member:
        """A member served by Text Generation Inference."""
        return cls(source=url, kind="tgi", **settings)

    @classmethod
    def vllm(cls, url: str, model: str | None = None, **settings: object) -> Member:
        """A member served by vLLM's OpenAI-compatible server: ``url`` is its address
        (``http://host:8000``, with or without ``/v1``). The server renders the conversation
        with its own chat template, and scores candidates from its prefix cache
        (``logprob_token_ids``) where it can; ``model`` names the served model when the
        server has several."""
        return cls(source=url, kind="vllm", model=model, **settings)

    @classmethod
    def openai_completions(cls, url: str, model: str | None = None, **settings: object) -> Member:
        """A member behind another OpenAI-style ``/v1/completions`` server
        (llama-cpp-python; for vLLM, :meth:`vllm` does more). ``url`` ends with the API
        root, e.g. ``http://host:8000/v1``."""
        return cls(source=url, kind="openai", model=model, **settings)

    @property
    def remote(self) -> bool:
        return self.kind != "local"

    @property
    def label(self) -> str:
        """The member's display name."""
        if self.name:
            return self.name
        if self.model:
            return self.model.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")
        if self.remote:
            return urlsplit(self.source).netloc
        tail = self.source.rstrip("/").rsplit("/", 1)[-1]
        return tail.removesuffix(".gguf")

    @property
    def drafts(self) -> bool:
        return self.role in ("both", "drafter")

    @property
    def verifies(self) -> bool:
        return self.role in ("both", "verifier")


def member_list(members: Any) -> list[Member]:
    """Members from specs (a built-in name, a folder, a ``.gguf``, ``tgi+URL``...),
    :class:`Member` objects or their dicts, one or several; at least one, with unique names."""
    if isinstance(members, (str, Member, dict)):
        members = [members]
    listed = [Member(source=m) if isinstance(m, str) else Member.model_validate(m) for m in members]
    if not listed:
        raise ValueError("give at least one member")
    labels = [m.label for m in listed]
    if len(set(labels)) != len(labels):
        raise ValueError(f"member names must be unique, got {labels}; set Member.name")
    return listed


def ensemble_name(members: Sequence[Member]) -> str:
    """The ensemble's readable name, naming its members: ``specem[smollm2-135m-instruct, ...]``
    (the model name every front end reports)."""
    return "specem[" + ", ".join(m.label for m in members) + "]"


@dataclass(frozen=True)
class ModelFiles:
    """Where a local model's files are."""

    path: str
    """A model folder, or a hub model id."""
    gguf_file: str | None = None
    """A GGUF file's name inside :attr:`path`."""

    @property
    def gguf(self) -> Path | None:
        return Path(self.path) / self.gguf_file if self.gguf_file else None


def model_files(source: str) -> ModelFiles:
    """A local member's source, once built-in names are resolved (see
    :func:`specem_chain.models.resolve`): a model folder, a GGUF file, or a hub model id."""
    path = Path(source).expanduser()
    if path.is_dir():
        return ModelFiles(str(path))
    if path.is_file() and path.suffix == ".gguf":
        return ModelFiles(str(path.parent), path.name)
    if path.exists():
        raise MemberSpecError(f"{source!r} is a file but not a .gguf model file")
    if source.startswith(("/", ".", "~")) or source.endswith(".gguf"):
        raise MemberSpecError(f"member path {source!r} does not exist")
    parts = source.split("/")
    if len(parts) == 2 and all(parts):
        return ModelFiles(source)  # a hub model id; loading tells if it is reachable
    raise MemberSpecError(
        f"unknown member {source!r}: give a built-in name (see `specem models list`), a "
        "model folder, a .gguf file, or a hub model id such as 'org/model'"
    )
