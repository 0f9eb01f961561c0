"""One registry of backends: a member's backend (its loaded weights, or its server's
connection pool) is made once per process and shared by every request, which opens a
session of its own on it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable, Sequence
from typing import Protocol

from ..engine.types import MemberSession, Message, Sampling, Tool
from ..errors import EnsembleError
from ..members import Member


class Backend(Protocol):
    """What is shared and heavy about one member; :meth:`open` starts a request on it."""

    context_tokens: int | None
    """Tokens the member's context holds, prompt and answer together (None where its server
    does not say; a server's is known once a request or :meth:`count` has reached it)."""

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> MemberSession:
        """A session for one request: the conversation rendered with the member's chat
        template (tools included) and read into the member's context. A member on a server
        sends every request of the session with the session header naming ``answer`` (the
        answer's id; :meth:`~specem_chain.backends.http.RemoteClient.answering`)."""
        ...

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """Tokens of the conversation as the member reads it (its prompt), without
        opening a session."""
        ...

    async def count_text(self, text: str) -> int:
        """Tokens of ``text`` in the member's tokenizer, without special tokens."""
        ...


_lock = threading.Lock()
_backends: dict[Hashable, Backend] = {}


def key(member: Member) -> Hashable:
    """What makes two members share one backend: the same model in the same place, or the
    same server with the same connection settings (a member's sampling and role are the
    request's, not the backend's)."""
    if member.remote:
        return member.model_copy(update={"sampling": Sampling(), "role": "both"})
    return (member.backend, member.source, member.device, member.dtype, member.batching)


def loaded_backend(member: Member) -> Backend:
    """The member's backend, made on first use (loading a local model blocks: call it off
    the event loop). A built-in name must be resolved to files first
    (:func:`specem_chain.models.resolve`)."""
    with _lock:
        found = _backends.get(key(member))
        if found is None:
            found = _backends[key(member)] = _make(member)
        return found


def release() -> None:
    """Forget every loaded backend, so that its model's memory is freed once nothing holds
    it (a member loads again at its next request). Call it between tasks, never while a
    request runs: that request's sessions keep their models, and the next one loads
    another copy."""
    with _lock:
        loaded = list(_backends.values())
        _backends.clear()
    for found in loaded:
        close = getattr(found, "close", None)  # llama.cpp's models free their memory now
        if close is not None:
            close()


def forget_prompts() -> None:
    """Empty every loaded model's cache of earlier requests, so that the next request reads
    its whole prompt, as a first request does (on llama.cpp a later one shares its prompt's
    whole chunks with the one before): for measurements that compare the times of answers
    made one after another. Never while a request runs."""
    with _lock:
        loaded = list(_backends.values())
    for found in loaded:
        forget = getattr(found, "forget", None)  # only llama.cpp's models keep prompts
        if forget is not None:
            forget()


def _make(member: Member) -> Backend:
    if member.kind == "tgi":
        from .tgi import TGIBackend

        return TGIBackend(member)
    if member.kind == "vllm":
        from .vllm import VLLMBackend

        return VLLMBackend(member)
    if member.kind == "openai":
        from .openai_completions import OpenAICompletionsBackend

        return OpenAICompletionsBackend(member)
    if member.backend == "llamacpp":
        try:
            from .llamacpp import LlamaCppBackend
        except ImportError as error:
            raise EnsembleError(
                f"member {member.label!r} runs on llama.cpp and needs the llamacpp extra: "
                "pip install 'specem-chain[llamacpp]'"
            ) from error
        return LlamaCppBackend.load(member)
    try:
        from .transformers import TransformersBackend
    except ImportError as error:
        raise EnsembleError(
            f"member {member.label!r} runs in this process and needs the local extra: "
            "pip install 'specem-chain[local]'"
        ) from error
    return TransformersBackend.load(member)


async def backend_for(member: Member) -> Backend:
    """:func:`loaded_backend`, loading a local member off the event loop."""
    if member.remote:
        return loaded_backend(member)
    return await asyncio.to_thread(loaded_backend, member)


async def open_session(
    member: Member,
    messages: Sequence[Message],
    tools: Sequence[Tool] = (),
    answer: str | None = None,
) -> MemberSession:
    """A session of the member for one request (the answer ``answer``, by its id)."""
    return await (await backend_for(member)).open(messages, tools, answer)
