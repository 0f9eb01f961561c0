"""The engine's vocabulary: what a member is asked to do, and what it answers.

Everything above the engine (backends, the request layer, the front ends) speaks these
types; the engine imports nothing above itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import NotRequired

Scoring = Literal["mean_logprob", "mean_logit"]
"""Per-token score a verifier averages over a candidate: log-probability or raw logit."""


class Sampling(BaseModel):
    """How a member samples its drafts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.6, ge=0.0, description="0 means greedy decoding.")
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    repeat_penalty: float = Field(
        1.1,
        ge=1.0,
        le=2.0,
        description="CTRL's repetition penalty: the logit of every token among the last "
        "REPEAT_LAST_N tokens of the context and draft is divided by it (multiplied when "
        "negative) before sampling; 1 turns it off. Servers apply their own: Guides -> Tuning.",
    )
    loop_penalty: float = Field(
        1.0,
        ge=1.0,
        le=2.0,
        description="The repetition penalty the member drafts with, at least, in a round "
        "drafted again because its candidates would make the answer go round a loop (each "
        "repeats text the answer already holds, after segments in a row that did); only "
        "such rounds are penalised, so the prompt's words stay free everywhere else. A "
        "member over 1 makes its rounds watch for loops; 1: never.",
    )
    drafts: int = Field(
        1,
        ge=1,
        le=8,
        description="Candidates the member drafts each round, one after another from the "
        "same context, each with a seed of its own; the verifiers choose among all of them.",
    )


Fits = Callable[[str, bool], bool]
"""Whether a draft's text (and ``True``: ending the turn there) can still be accepted in the
answer's required format; given to a member's :meth:`~MemberSession.draft` under a format."""

REPEAT_LAST_N = 64
"""How many of the latest tokens the repetition penalty looks back over (llama.cpp's
default ``repeat_last_n``)."""


@dataclass(frozen=True)
class Draft:
    """A member's sampled continuation of at most ``window`` tokens."""

    text: str
    tokens: int
    finished: bool
    """True when the member ended its turn (end-of-turn token or its own stop text)."""
    at_boundary: bool = False
    """True when the draft ends where a word ends (it ran on to its member's next word),
    so it is not cut back to its last word boundary."""


@dataclass(frozen=True)
class Segment:
    """Text to score or accept. A finished segment also ends the turn."""

    text: str
    finished: bool = False

    @property
    def units(self) -> int:
        """Its length in the unit that compares across tokenizers: UTF-8 bytes, plus one for
        the end of the turn."""
        return len(self.text.encode()) + self.finished


@dataclass(frozen=True)
class Score:
    """A verifier's view of one candidate: its mean per-token score and its length in the
    verifier's own tokens (so ``mean * tokens`` is the candidate's total log-probability),
    and its least likely token's score."""

    mean: float
    tokens: int
    least: float
    """The lowest per-token score: a candidate likely on the whole may hold one token the
    verifier finds unlikely (a wrong digit)."""

    @classmethod
    def of(cls, values: Sequence[float]) -> Score:
        """The score of a candidate whose tokens score ``values``."""
        values = [float(v) for v in values]
        return cls(math.fsum(values) / len(values), len(values), min(values))


class MemberSession(Protocol):
    """One member's state for one request: its rendered conversation and token context.

    A session is created per request and never shared, so concurrent requests are safe. Its
    context is always its tokenizer's reading of the rendered conversation followed by the
    accepted answer text, as one text: a token that merges across a segment's start is read
    as the merged token, the same way for every backend.
    """

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the rendered conversation, in this member's tokenizer."""
        ...

    @property
    def runs_on(self) -> str:
        """Where the member runs, as the answer's provenance names it: ``llamacpp`` or
        ``transformers`` in this process, or its server's kind (``tgi``, ``openai``,
        ``vllm (logprob_token_ids)`` with how the server scores)."""
        ...

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        """Sample a continuation of the current context, at most ``window`` tokens; with
        ``run_on``, go on past the window to the end of the word it is in (members that
        can: servers draft a fixed number of tokens). With ``fits``, members that sample
        token by token (in this process) draw each token among those that keep the draft
        fitting, so their drafts never break the answer's format; servers draft freely and
        the engine shapes their drafts after."""
        ...

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        """Each candidate's mean per-token score as a continuation of the context.

        The candidate's tokens are those of the context followed by the candidate, after
        their common start with the context's own tokens. With ``mean_logprob`` the
        per-token score is the log-probability; with ``mean_logit`` the raw logit. A
        finished candidate is scored together with this member's own end-of-turn token, so
        an empty finished candidate ("stop here") gets the probability of stopping.
        """
        ...

    async def accept(self, segment: Segment) -> int:
        """Append the winning segment to the context; return the tokens the context grew by."""
        ...

    async def aclose(self) -> None:
        """Release what the session holds (KV cache, connections)."""
        ...


# -- conversations -------------------------------------------------------------------------


class Function(TypedDict):
    name: str
    arguments: dict[str, Any]


class ToolCall(TypedDict):
    """A tool call in an assistant turn, as chat templates take it."""

    id: str
    type: Literal["function"]
    function: Function


def tool_call(call_id: str | None, name: str, arguments: dict[str, Any] | str | None) -> ToolCall:
    """An earlier answer's tool call as a chat template reads it, from any front end's
    form: arguments as an object or as JSON text (OpenAI's); a ValueError says when they
    are not a JSON object."""
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
    if args is None and arguments is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError(f"the arguments of {call_id or name!r} are not a JSON object")
    return {"id": call_id or "", "type": "function", "function": {"name": name, "arguments": args}}


class Message(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    """An assistant turn's tool calls."""
    tool_call_id: NotRequired[str]
    """A tool turn's answer to this call."""
    name: NotRequired[str]
    """A tool turn's tool."""


Tool = dict[str, Any]
"""A tool in the OpenAI format: ``{"type": "function", "function": {"name", "description",
"parameters"}}``."""
