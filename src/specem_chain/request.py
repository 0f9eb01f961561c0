"""One request end to end, for every front end (LangChain, the CLI, ``specem eval``, the
OpenAI-compatible server and the adapters)::

    settings, options = merge_call(defaults, call_arguments)
    async with open_request(members, messages, settings, options) as run:
        async for update in run:
            print(update.text, end="")
    run.answer  # text, provenance, wins, weights, usage

A :class:`Request` checks its input before any member runs, resolves built-in members into
their files, opens a session per member, runs the rounds under the answer's format and
deadline, splits tool calls out of the text, and closes every session however it ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field

from .answer_formats import ANSWER_OPTIONS, AnswerOptions, tool_names, with_instruction
from .backends import Backend, backend_for, open_session
from .engine import EngineConfig, RoundEvent, Seat, run_rounds
from .engine.config import EngineSettings
from .engine.tool_calls import ParsedCall, ToolCallSplitter
from .engine.types import MemberSession, Message, Sampling, Score, Segment, Tool
from .errors import EnsembleError, MemberUnavailable, RequestError, UnknownArgumentError
from .feedback import Feedback
from .members import Member
from .models import resolve

T = TypeVar("T")

Preset = Literal["rerank"]
PRESETS: dict[Preset, dict[str, Any]] = {
    "rerank": {"drafts": 2, "repeat_penalty": 1.0, "loop_penalty": 1.3},
}
"""The named sampling recipes a request may pick (:attr:`RequestSettings.preset`): the
:class:`Sampling` settings every member then drafts with."""


class RequestSettings(EngineSettings):
    """Everything a front end may set for a request: the loop's settings
    (:class:`~specem_chain.engine.config.EngineSettings`) and two of the request's own.
    Unknown settings are refused."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(
        None, ge=0.0, description="Every member's sampling temperature; unset keeps each own."
    )
    repeat_penalty: float | None = Field(
        None,
        ge=1.0,
        le=2.0,
        description="Every member's repetition penalty in drafting (1: none); unset keeps "
        "each own.",
    )
    loop_penalty: float | None = Field(
        None,
        ge=1.0,
        le=2.0,
        description="Every member's repetition penalty in a round drafted again to break a "
        "loop (1: such rounds are not drafted again); unset keeps each own.",
    )
    drafts: int | None = Field(
        None,
        ge=1,
        le=8,
        description="Candidates every drafting member drafts each round; unset keeps each "
        "own (Member.sampling.drafts).",
    )
    preset: Preset | None = Field(
        None,
        description='"rerank": every member drafts two candidates a round without the '
        "repetition penalty, the verifiers keep the likelier, and a looping round is drafted "
        "again with penalty 1.3 (about twice the time; Guides -> Tuning). temperature, "
        "repeat_penalty, loop_penalty and drafts, where set, win over it.",
    )
    answer_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds one answer may take, from its start; then it fails with "
        "TimeoutError. (A remote member's per-request timeout is Member.request_timeout.)",
    )

    def engine_config(self, stop: Sequence[str] = ()) -> EngineConfig:
        """The loop's settings, with the request's stop sequences."""
        return EngineConfig(
            **{name: getattr(self, name) for name in EngineSettings.model_fields},
            stop=tuple(stop),
        )

    def tuned(self, members: Sequence[Member]) -> list[Member]:
        """The members, with the sampling settings set here as every one's: the
        :attr:`preset`'s (:data:`PRESETS`), then :attr:`temperature`, :attr:`repeat_penalty`,
        :attr:`loop_penalty` and :attr:`drafts` over them."""
        overrides = {
            **(PRESETS[self.preset] if self.preset else {}),
            **{
                name: value
                for name in Sampling.model_fields
                if (value := getattr(self, name, None)) is not None
            },
        }
        if not overrides:
            return list(members)
        return [
            m.model_copy(update={"sampling": m.sampling.model_copy(update=overrides)})
            for m in members
        ]


CALL_ARGUMENTS = (*RequestSettings.model_fields, *ANSWER_OPTIONS)
"""What one call may give, in every front end: the request's settings and the answer's
options (:class:`~specem_chain.answer_formats.AnswerOptions`)."""


def merge_call(
    defaults: RequestSettings,
    arguments: Mapping[str, Any],
    *,
    stop: Sequence[str] | None = (),
    what: str = "call arguments",
    also: Sequence[str] = (),
) -> tuple[RequestSettings, AnswerOptions]:
    """One call's settings and answer options: ``arguments`` over a front end's
    ``defaults`` (any object with the request's settings as attributes), with the front
    end's own ``stop`` sequences before the call's.

    Every front end calls it, so each accepts the same arguments (:data:`CALL_ARGUMENTS`)
    and refuses the same way, before any member runs: an unknown argument raises
    :class:`~specem_chain.errors.UnknownArgumentError` naming it as the front end calls its
    arguments (``what``) and listing the known ones (those the front end takes itself,
    ``also``, first); a bad value a ValidationError that names it; a bad answer option a
    ValueError.
    """
    unknown = [name for name in arguments if name not in CALL_ARGUMENTS]
    if unknown:
        known = ", ".join((*also, *CALL_ARGUMENTS))
        raise UnknownArgumentError(f"unsupported {what} {unknown}; known: {known}")
    settings = RequestSettings.model_validate(
        {
            name: arguments.get(name, getattr(defaults, name))
            for name in RequestSettings.model_fields
        }
    )
    options = AnswerOptions(**{k: v for k, v in arguments.items() if k in ANSWER_OPTIONS})
    if stop:
        options = replace(options, stop=(*stop, *options.stop))
    return settings, options


@dataclass(frozen=True)
class Usage:
    """Tokens summed over the members: prompt tokens read, and every token drafted (an
    answer's real cost: a losing draft was drafted too)."""

    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def openai(self) -> dict[str, int]:
        """In OpenAI's names, as the OpenAI API, LlamaIndex and Haystack report usage."""
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass
class Answer:
    """Everything one request produced, gathered from its round events."""

    members: list[str]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The answer's id: its remote members send it in their session header
    (:attr:`Member.session_header <specem_chain.members.Member.session_header>`), so that a
    router keeps every request of the answer on one replica of a member's server."""
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    rounds: list[RoundEvent] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    """Members that could not be reached when the request started, with the reason."""
    start_weights: dict[str, float] = field(default_factory=dict)
    """The members' weights at the start: uniform, or the task's (:class:`Feedback`)."""
    tool_calls: list[ParsedCall] = field(default_factory=list)
    """The tool calls found in the answer, with their ids (when tools were given)."""
    backends: dict[str, str] = field(default_factory=dict)
    """Where each member ran: ``llamacpp`` or ``transformers`` in this process, or its
    server's kind (``tgi``, ``openai``)."""

    def add(self, event: RoundEvent) -> None:
        self.rounds.append(event)

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.rounds)

    @property
    def finish_reason(self) -> str | None:
        return self.rounds[-1].finish_reason if self.rounds else None

    @property
    def stop_reason(self) -> str | None:
        """Why the answer ended, in the words OpenAI-style APIs use: ``"tool_calls"`` (it
        ended with a valid call), ``"stop"`` or ``"length"``."""
        reason = self.finish_reason
        if reason is None:
            return None
        if reason == "length":
            return "length"
        return "tool_calls" if any(c.valid for c in self.tool_calls) else "stop"

    def metadata(self) -> dict[str, Any]:
        """What every front end reports beside the text (LangChain's and Haystack's
        ``["specem"]`` metadata, LlamaIndex's ``raw["specem"]``, the OpenAI server's
        ``specem``): why it ended, wins, starting and final weights, per-member usage,
        drops, where each member ran, and the tool calls that could not be read."""
        usage = self.usage()
        metadata = {
            "finish_reason": self.finish_reason,
            "wins": self.wins,
            "start_weights": self.start_weights,
            "weights": self.weights,
            "usage": usage["per_member"],
            "answer_tokens": usage["answer_tokens"],
            "dropped": self.dropped,
            "backends": self.backends,
        }
        invalid = [call.record() for call in self.tool_calls if not call.valid]
        return metadata | ({"invalid_tool_calls": invalid} if invalid else {})

    @property
    def weights(self) -> dict[str, float]:
        if not self.rounds:
            return {m: 1.0 / len(self.members) for m in self.members}
        return {m: self.rounds[-1].weights.get(m, 0.0) for m in self.members}

    @property
    def wins(self) -> dict[str, int]:
        wins = dict.fromkeys(self.members, 0)
        for event in self.rounds:
            wins[event.winner] += 1
        return wins

    @property
    def dropped(self) -> dict[str, str]:
        """Members dropped during the request (they kept failing), with the reason."""
        later = {m: why for event in self.rounds for m, why in event.dropped.items()}
        return {**self.unavailable, **later}

    @property
    def drafted_tokens(self) -> dict[str, int]:
        drafted = dict.fromkeys(self.members, 0)
        for event in self.rounds:
            for member, tokens in event.drafted_tokens.items():
                drafted[member] += tokens
        return drafted

    @property
    def tokens(self) -> Usage:
        """Prompt and drafted tokens so far, summed over members."""
        return Usage(sum(self.prompt_tokens.values()), sum(self.drafted_tokens.values()))

    def usage(self) -> dict[str, Any]:
        """Prompt and drafted tokens, summed over members and per member."""
        drafted, tokens = self.drafted_tokens, self.tokens
        return {
            "input_tokens": tokens.input_tokens,
            "output_tokens": tokens.output_tokens,
            "total_tokens": tokens.total_tokens,
            "answer_tokens": self.rounds[-1].answer_tokens if self.rounds else 0,
            "per_member": {
                m: {"input_tokens": self.prompt_tokens.get(m, 0), "output_tokens": drafted[m]}
                for m in self.members
            },
        }

    def segments(self) -> list[dict[str, Any]]:
        """Per-round provenance: the accepted text, its member, the candidates and scores."""
        return [segment_record(e) for e in self.rounds]

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "segments": self.segments(),
            "members": self.members,
            "wins": self.wins,
            "start_weights": self.start_weights,
            "weights": self.weights,
            "usage": self.usage(),
            "finish_reason": self.finish_reason,
            "dropped": self.dropped,
            "backends": self.backends,
        }


def segment_record(event: RoundEvent) -> dict[str, Any]:
    """One round's provenance as plain data: text, member, candidates, scores, weights, and
    what the verifiers said as the policy saw it (``verification``: each verifier's mean
    log-prob of each candidate, its least likely token's and its length in that verifier's
    tokens, and each candidate's length in bytes); ``resting`` and ``loop_redraft`` when
    they apply."""
    record: dict[str, Any] = {
        "text": event.segment,
        "member": event.winner,
        "candidates": [
            {"member": c.member, "text": c.text}
            | ({"source": c.source} if c.source != "draft" else {})
            for c in event.candidates
        ],
        "verifiers": list(event.verifiers),
        "scores": [list(row) for row in event.scores],
        "weights": event.weights,
        "dropped": event.dropped,
    }
    if event.resting:
        record["resting"] = list(event.resting)
    if event.loop_redraft:
        record["loop_redraft"] = True
    if event.verification is not None:
        v = event.verification
        record["verification"] = {
            "means": [list(row) for row in v.means],
            "tokens": [list(row) for row in v.tokens],
            "units": list(v.units),
            "scoring": v.scoring,
            "least": [list(row) for row in v.least],
        }
        record["rewards"] = event.rewards
    return record


@dataclass(frozen=True)
class Update:
    """One round, as a front end shows it."""

    event: RoundEvent
    text: str
    """Answer text released this round; with tools bound, the prose only."""
    tool_calls: tuple[ParsedCall, ...] = ()
    """Tool calls completed this round (a bad one has ``valid`` False)."""
    tokens: Usage = Usage(0, 0)
    """This round's cost: the tokens drafted in it (and, in the first, the prompts')."""

    @property
    def finished(self) -> bool:
        return self.event.finished


class Request:
    """One request; see the module's docstring. Use it with ``async with`` (or
    :func:`open_request`), then iterate over its :class:`Update` s."""

    def __init__(
        self,
        members: Sequence[Member],
        messages: Sequence[Message],
        settings: RequestSettings | None = None,
        options: AnswerOptions | None = None,
        *,
        feedback: Feedback | None = None,
    ) -> None:
        settings = settings or RequestSettings()
        options = options or AnswerOptions()
        if not members:
            raise RequestError("give at least one member")
        if not messages:
            raise RequestError("the conversation is empty: give at least one message")
        self.format = options.format
        self.config = settings.engine_config((*options.stop, *self.format.stop))
        remote = [m.label for m in members if m.remote]
        if remote and self.config.scoring != "mean_logprob":
            raise RequestError(
                f"scoring={self.config.scoring!r} needs raw logits, which servers do not "
                f"return; members {remote} are remote: use scoring='mean_logprob'"
            )
        labels = [m.label for m in members]
        if self.config.anchor is not None and self.config.anchor not in labels:
            raise RequestError(
                f"anchor={self.config.anchor!r} is not a member; the members: {labels}"
            )
        self.members = settings.tuned(members)
        self.timeout = settings.answer_timeout
        self.feedback = feedback
        self.messages = merge_turns(messages)
        if self.format.instruction:
            self.messages = with_instruction(self.messages, self.format.instruction)
        self.answer = Answer(members=[m.label for m in self.members])
        self._sessions: list[MemberSession] = []
        self._splitter = (
            ToolCallSplitter(tool_names(self.format.tools)) if self.format.tools else None
        )

    async def __aenter__(self) -> Request:
        loop = asyncio.get_running_loop()
        self._deadline = None if self.timeout is None else loop.time() + self.timeout
        try:
            seats = await self._in_time(self._open())
            names = [s.name for s in seats]
            start = (
                await self.feedback.aweights(names)
                if self.feedback is not None
                else {name: 1.0 / len(seats) for name in names}
            )
        except BaseException:
            await self.aclose()
            raise
        self.answer.start_weights = start
        self._rounds = run_rounds(seats, self.config, self.format.answer, list(start.values()))
        return self

    async def _in_time(self, step: Awaitable[T]) -> T:
        """``await step``, failing with TimeoutError once the answer's time is up."""
        if self._deadline is None:
            return await step
        remaining = max(self._deadline - asyncio.get_running_loop().time(), 0)
        try:
            return await asyncio.wait_for(step, remaining)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"the answer took longer than answer_timeout={self.timeout} s"
            ) from None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _open(self) -> list[Seat]:
        """A seat per member whose session opened; a member that cannot be reached is left
        out (as one that fails later is dropped), unless too few are left."""
        resolved = await asyncio.gather(*(asyncio.to_thread(resolve, m) for m in self.members))
        self.answer.backends = {
            m.label: m.backend if m.kind == "local" else m.kind for m in resolved
        }
        opened = await asyncio.gather(
            *(open_session(m, self.messages, self.format.tools, self.answer.id) for m in resolved),
            return_exceptions=True,
        )
        self._sessions = [s for s in opened if not isinstance(s, BaseException)]
        for result in opened:
            if isinstance(result, BaseException) and not isinstance(result, MemberUnavailable):
                raise result
        seats = []
        for member, result in zip(self.members, opened):
            if isinstance(result, MemberUnavailable):
                self.answer.unavailable[member.label] = result.reason
            else:
                self.answer.backends[member.label] = result.runs_on
                self.answer.prompt_tokens[member.label] = result.prompt_tokens
                seats.append(
                    Seat(member.label, result, member.sampling, member.drafts, member.verifies)
                )
        if self.answer.unavailable and len(seats) < self.config.min_members:
            why = "; ".join(f"{m}: {r}" for m, r in self.answer.unavailable.items())
            raise EnsembleError(
                f"only {len(seats)} of {len(self.members)} members could be reached, fewer "
                f"than min_members={self.config.min_members}; {why}"
            )
        return seats

    async def __aiter__(self) -> AsyncIterator[Update]:
        while True:
            try:
                event = await self._in_time(self._rounds.__anext__())
            except StopAsyncIteration:
                return
            self.answer.add(event)
            if event.finished and self.feedback is not None:
                await self.feedback.arecord(self.answer.weights, self.answer.dropped)
            yield self._update(event)

    async def updates(self) -> AsyncIterator[Update]:
        """The whole request as one async iterator: opened, its updates, and closed however
        the iteration ends (for code that cannot hold it in ``async with``)."""
        async with self as run:
            async for update in run:
                yield update

    def _update(self, event: RoundEvent) -> Update:
        first = len(self.answer.rounds) == 1
        prompts = sum(self.answer.prompt_tokens.values()) if first else 0
        tokens = Usage(prompts, sum(event.drafted_tokens.values()))
        if self._splitter is None:
            return Update(event, event.text, tokens=tokens)
        prose, parsed = self._splitter.step(event.text, event.finished)
        calls = [replace(c, id=f"call_{uuid.uuid4().hex[:24]}") for c in parsed]
        self.answer.tool_calls.extend(calls)
        return Update(event, prose, tuple(calls), tokens)

    async def aclose(self) -> None:
        """Stop the rounds and close every session (safe to call twice)."""
        rounds = getattr(self, "_rounds", None)
        if rounds is not None:
            await rounds.aclose()
        sessions, self._sessions = self._sessions, []
        await asyncio.gather(*(s.aclose() for s in sessions))


def merge_turns(messages: Sequence[Message]) -> list[Message]:
    """The conversation with consecutive text turns of one role merged into one (many chat
    templates refuse two user turns in a row); tool turns and turns with tool calls stay
    apart."""
    merged: list[Message] = []
    for message in messages:
        last = merged[-1] if merged else None
        if (
            last
            and last["role"] == message["role"] != "tool"
            and not (last.get("tool_calls") or message.get("tool_calls"))
        ):
            merged[-1] = {**last, "content": f"{last['content']}\n\n{message['content']}"}
        else:
            merged.append(dict(message))  # type: ignore[arg-type]
    return merged


async def loaded(member: Member) -> Backend:
    """The member's backend, resolved (a built-in one fetched and converted on first use)
    and loaded as for a request."""
    return await backend_for(await asyncio.to_thread(resolve, member))


async def warm_up(members: Sequence[Member]) -> None:
    """Resolve and load every member's backend now, so the first request does not wait
    for it."""
    await asyncio.gather(*(loaded(m) for m in members))


async def count_tokens(
    members: Sequence[Member],
    messages: Sequence[Message] | None = None,
    *,
    text: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> dict[str, int]:
    """Each member's token count of a conversation (its prompt, as a request would render
    it) or of a ``text``, in the member's own tokenizer; members load as for a request."""
    if (messages is None) == (text is None):
        raise ValueError("count the tokens of messages or of a text, not both")

    async def count(member: Member) -> int:
        found = await loaded(member)
        if messages is None:
            return await found.count_text(text or "")
        return await found.count(messages, list(tools))

    counts = await asyncio.gather(*(count(m) for m in members))
    return dict(zip((m.label for m in members), counts))


@dataclass(frozen=True)
class PromptSize:
    """A conversation's prompt as one member reads it, and the room its context has."""

    tokens: int
    context: int | None
    """Tokens the member's context holds, prompt and answer (None: its server does not
    say)."""


async def contexts(members: Sequence[Member]) -> dict[str, int | None]:
    """Each member's context, in tokens, as known now (None: not known; a server's is once
    it has been asked once); members load as for a request."""
    found = await asyncio.gather(*(loaded(m) for m in members))
    return {m.label: b.context_tokens for m, b in zip(members, found)}


async def prompt_sizes(
    members: Sequence[Member], messages: Sequence[Message], tools: Sequence[Tool] = ()
) -> dict[str, PromptSize]:
    """Each member's prompt for a conversation, counted in its own tokenizer, with its
    context: for checks made before any member runs. Counting asks a member's server to
    tokenize, which runs no model, except on an OpenAI-style server, which counts a prompt
    by answering it: leave such members out. A member whose server cannot be reached is
    left out too, as a request leaves it out (:class:`MemberUnavailable`)."""

    async def size(member: Member) -> PromptSize:
        found = await loaded(member)
        tokens = await found.count(messages, list(tools))
        return PromptSize(tokens, found.context_tokens)

    sizes = await asyncio.gather(*(size(m) for m in members), return_exceptions=True)
    for size_ in sizes:
        if isinstance(size_, BaseException) and not isinstance(size_, MemberUnavailable):
            raise size_
    return {
        m.label: size_
        for m, size_ in zip(members, sizes)
        if not isinstance(size_, MemberUnavailable)
    }


def open_request(
    members: Sequence[Member],
    messages: Sequence[Message],
    settings: RequestSettings | None = None,
    options: AnswerOptions | None = None,
    *,
    feedback: Feedback | None = None,
) -> Request:
    """A :class:`Request` with the answer's ``options`` (stop sequences, tools, format) and
    ``feedback`` (a :class:`~specem_chain.feedback.Feedback`: the task's weights, which the
    request starts from and updates when it ends)."""
    return Request(members, messages, settings, options, feedback=feedback)


@asynccontextmanager
async def member_session(
    member: Member, messages: Sequence[Message]
) -> AsyncIterator[MemberSession]:
    """One member's session on a conversation, outside any ensemble (resolved and loaded as
    for a request, closed when the block ends): for front ends that read a member's own
    scores or drafts, as baselines and log-likelihood tasks do."""
    resolved = await asyncio.to_thread(resolve, member, progress=False)
    session = await open_session(resolved, messages)
    try:
        yield session
    finally:
        await session.aclose()


async def score_with(
    member: Member, messages: Sequence[Message], candidates: Sequence[Segment]
) -> list[Score]:
    """Each candidate's score (mean log-prob and tokens) as the member's answer to the
    conversation."""
    async with member_session(member, messages) as session:
        return await session.score(candidates, "mean_logprob")
