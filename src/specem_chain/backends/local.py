"""What the in-process sessions (transformers, llama.cpp) share: the member's context by the
one context rule, and their model calls run off the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from ..engine.types import Draft, Fits, Sampling, Score, Scoring, Segment
from .drafting import common_prefix, decode_after, finish_draft
from .template import ChatTemplate

T = TypeVar("T")


class LocalBackend(Protocol):
    turn_end: int
    """The token a finished candidate ends with."""
    template: ChatTemplate

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


class LocalSession:
    """One request's context on an in-process model.

    The context is always the model's tokenizer's reading of the rendered conversation and
    the accepted answer as one text (:attr:`text`), so a token that merges across a join is
    read as the merged token. Subclasses implement ``_draft``, ``_score`` and ``_accept``.
    """

    executor: Executor | None = None
    """Where its model calls run; None: the event loop's default pool."""

    def __init__(self, backend: LocalBackend, prompt: str) -> None:
        self.backend = backend
        self.text = prompt
        """The rendered conversation followed by the accepted answer."""
        self.ids = backend.encode(prompt)
        """The context: :attr:`text` as the member's tokenizer reads it."""
        self.prompt_tokens = len(self.ids)

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        return await self._off_loop(self._draft, window, sampling, seed, run_on, fits)

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        return await self._off_loop(self._score, candidates, scoring)

    async def accept(self, segment: Segment) -> int:
        return await self._off_loop(self._accept, segment)

    async def _off_loop(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on a thread of :attr:`executor`."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(call, *args))

    def _draft(
        self, window: int, sampling: Sampling, seed: int, run_on: bool, fits: Fits | None
    ) -> Draft:
        raise NotImplementedError

    def _score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        raise NotImplementedError

    def _accept(self, segment: Segment) -> int:
        raise NotImplementedError

    def _decode(self, tokens: list[int]) -> str:
        """The text of drafted tokens as it reads after the context."""
        return decode_after(self.backend.decode, self.ids[-1], tokens)

    def _extended(self, segment: Segment) -> tuple[int, list[int]]:
        """The context's tokens with ``segment`` after it (a finished one ends with the
        end-of-turn token), and where they first differ from the context's own."""
        ids = self.backend.encode(self.text + segment.text)
        if segment.finished:
            ids.append(self.backend.turn_end)
        return common_prefix(self.ids, ids), ids

    def _candidate(self, segment: Segment) -> tuple[int, list[int]]:
        """Where a candidate's tokens start in the context, and the tokens: those of the
        context and candidate read as one text, after their common start with the context
        (so a token merged across the join is the candidate's)."""
        start, ids = self._extended(segment)
        if start == len(ids):
            raise ValueError("cannot score an empty candidate that does not end the turn")
        return start, ids[start:]

    def _grow(self, segment: Segment) -> tuple[int, int]:
        """Append the segment to the context; return where the new tokens start and how
        many tokens the context grew by."""
        start, ids = self._extended(segment)
        grew, self.ids = len(ids) - len(self.ids), ids
        self.text += segment.text
        return start, grew

    def _finish(self, tokens: list[int], finished: bool, at_boundary: bool) -> Draft:
        """The draft of ``tokens``: its text, and its cost in tokens read (the end-of-turn
        token, or the token that starts the next word, counts: it was sampled too)."""
        cost = len(tokens) + finished + at_boundary
        draft = finish_draft(self._decode(tokens), cost, finished, self.backend.template.stop)
        return replace(draft, at_boundary=at_boundary and not draft.finished)
