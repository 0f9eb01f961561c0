"""The server's limits on a request, checked before any member runs, as TGI's router checks
its own (``router/src/validation.rs``): :class:`Limits` holds what the operator sets (each a
``specem serve`` option), :class:`Guard` the values in force and the checks. Each failure is
a 400 (413 for the body) whose message names the limit, the value sent and the option that
changes it.

A request is checked in three steps, cheapest first:

1. its body's size, as it is read (:mod:`.admission`);
2. its fields (:meth:`Guard.check_fields`): ``max_tokens``, the stop sequences, the number of
   messages and tools, the OpenAI fields this server does not implement
   (:data:`UNSUPPORTED`), and the prompt's length in characters, which refuses a prompt far
   past every member's context before any tokenizer reads it;
3. its prompt in tokens (:meth:`Guard.check_prompt`), counted in each member's own tokenizer:
   above ``--max-input-tokens``, or too long to leave the answer its room in a member's
   context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from specem_chain import Member, models
from specem_chain.backends.http import MAX_CONNECTIONS
from specem_chain.cli_options import option_name
from specem_chain.engine.types import Message, Tool
from specem_chain.request import contexts, prompt_sizes

from .errors import APIError, bad_request
from .schema import ChatCompletionRequest

MAX_TOKENS_FACTOR = 8
"""``--max-tokens-limit``'s default: this many times the server's own ``--max-tokens``."""

CHARACTERS_PER_TOKEN = 16
"""A bound on the characters one token holds in any text worth answering (about 4 in
English prose, 3 in code): a prompt with more characters than this many times the tokens it
may have is refused without being tokenised (see :meth:`Guard.check_fields`)."""

OPENAI_STOP_SEQUENCES = 4
"""OpenAI's own limit on ``stop``."""

OPENAI_TOOLS = 128
"""OpenAI's own limit on ``tools``."""


def unsupported_when(harmless: Sequence[Any]) -> Callable[[Any], bool]:
    return lambda value: value not in harmless


UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "logprobs": (
        unsupported_when((None, False)),
        "the answer's tokens are chosen among several members' drafts, and no one model's "
        "log-probabilities describe them (an answer's scores are in its `specem` field)",
    ),
    "top_logprobs": (
        unsupported_when((None, 0)),
        "the answer's tokens are chosen among several members' drafts, and no one model's "
        "log-probabilities describe them",
    ),
    "n": (unsupported_when((None, 1)), "the server makes one answer a request (n: 1)"),
    "modalities": (
        unsupported_when((None, ["text"])),
        'the members write text only (modalities: ["text"])',
    ),
    "audio": (unsupported_when((None,)), "the members write text only"),
    "prediction": (
        unsupported_when((None,)),
        "predicted outputs are not implemented: every segment is drafted by the members",
    ),
    "logit_bias": (
        unsupported_when((None, {})),
        "the members' tokenizers differ, so no token ids can be biased for all of them",
    ),
    "functions": (unsupported_when((None, [])), "the legacy functions field: send tools"),
    "function_call": (
        unsupported_when((None,)),
        "the legacy function_call field: send tool_choice",
    ),
    "web_search_options": (unsupported_when((None,)), "the server has no web search"),
}
"""OpenAI fields that would change what the client gets back, which this server does not
implement: each a 400 naming the field and the reason, unless it has a value that asks for
nothing (``logprobs: false``, ``n: 1``)."""

IGNORED: dict[str, str] = {
    "model": "the server serves one ensemble, and answers with its own name",
    "user": "a tag for the client's own records",
    "safety_identifier": "a tag for the client's own records",
    "prompt_cache_key": "a cache hint; members on vLLM reuse their prefix cache by themselves",
    "store": "the server stores no answers",
    "service_tier": "the server has one tier",
    "top_p": "tunes sampling; the members draft with their own sampling settings",
    "frequency_penalty": "tunes sampling; repeat_penalty and loop_penalty are the server's own",
    "presence_penalty": "tunes sampling; repeat_penalty and loop_penalty are the server's own",
    "reasoning_effort": "tunes a reasoning model's thinking; the members have no such switch",
    "verbosity": "tunes a model's length of answer; max_tokens bounds the answer",
    "stream_options.include_obfuscation": "pads streamed chunks; the server sends none",
}
"""OpenAI fields that only tag a request or tune its sampling: accepted and ignored, as
other OpenAI-compatible servers do (Deploying guide: each with its reason). Fields OpenAI
does not define are ignored too."""


class Limits(BaseModel):
    """What an operator may set of the server's guard; ``specem serve`` has an option for
    each (``--max-concurrent-requests``...). None: sized from the members and settings."""

    max_concurrent_requests: int | None = Field(
        None,
        ge=1,
        description="Answers in progress at once, per worker; beyond it requests wait in the "
        "queue. Default: sized from the members, the smallest of 8 for a llama.cpp "
        "member with batching (the sequences one batch reads), 2 for another member in this "
        "process (it makes one model call at a time, so more answers only make each slower) "
        f"and {MAX_CONNECTIONS} for a member on a server (the connections kept to it).",
    )
    max_queue: int | None = Field(
        None,
        ge=0,
        description="Requests waiting for an answer's slot, per worker; past it a request is "
        "refused at once with 429 and Retry-After. Default: --max-concurrent-requests (a "
        "request waits at most about one answer's time).",
    )
    max_tokens_limit: int | None = Field(
        None,
        ge=1,
        description="The largest max_tokens (or max_completion_tokens) a request may ask for. "
        f"Default: {MAX_TOKENS_FACTOR} times --max-tokens.",
    )
    max_input_tokens: int | None = Field(
        None,
        ge=1,
        description="The longest prompt, in each member's own tokens. Default: none beyond "
        "each member's context less the answer's room (max_tokens).",
    )
    max_body_bytes: int = Field(
        4 * 2**20,
        ge=1024,
        description="The largest request body; a larger one gets 413 without being read whole.",
    )
    max_messages: int = Field(1024, ge=1, description="The most messages a request may have.")
    max_stop_sequences: int = Field(
        OPENAI_STOP_SEQUENCES,
        ge=0,
        description="The most stop sequences a request may give (OpenAI's limit: 4).",
    )
    max_stop_length: int = Field(256, ge=1, description="The longest stop sequence, in characters.")
    max_tools: int = Field(
        OPENAI_TOOLS, ge=0, description="The most tools a request may give (OpenAI's limit: 128)."
    )


def concurrency(members: Sequence[Member]) -> int:
    """The default of ``--max-concurrent-requests`` (see :class:`Limits`)."""

    def answers_at_once(member: Member) -> int:
        if member.remote:
            return MAX_CONNECTIONS
        if member.batching and models.runs_on(member) == "llamacpp":
            from specem_chain.backends.batching import SEQUENCES  # imports llama_cpp

            return SEQUENCES
        return 2

    return min(answers_at_once(m) for m in members)


def too_large(what: str, value: int, limit: int, name: str, param: str | None = None) -> APIError:
    return bad_request(
        f"{what} is {value}, more than this server's limit of {limit} ({option_name(name)}); "
        f"send at most {limit}, or ask the operator to raise {option_name(name)}",
        param,
    )


@dataclass(frozen=True)
class Guard:
    """The limits in force on one server (:meth:`Limits`' defaults resolved) and the checks
    of a request against them."""

    limits: Limits
    max_concurrent_requests: int
    max_queue: int
    max_tokens_limit: int

    @classmethod
    def of(cls, limits: Limits, members: Sequence[Member], max_tokens: int) -> Guard:
        """The guard of a server with these ``members`` and default ``max_tokens``."""
        concurrent = limits.max_concurrent_requests or concurrency(members)
        return cls(
            limits,
            concurrent,
            concurrent if limits.max_queue is None else limits.max_queue,
            limits.max_tokens_limit or MAX_TOKENS_FACTOR * max_tokens,
        )

    def check_fields(self, body: ChatCompletionRequest) -> None:
        """Every limit a request's fields can be checked against without a tokenizer."""
        for name, (unsupported, why) in UNSUPPORTED.items():
            value = (body.model_extra or {}).get(name)
            if unsupported(value):
                raise bad_request(
                    f"{name}={json.dumps(value)[:80]} is not supported by this server: {why}",
                    name,
                )
        limits = self.limits
        asked = body.asked_tokens
        if asked is not None and asked > self.max_tokens_limit:
            param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
            raise too_large(param, asked, self.max_tokens_limit, "max_tokens_limit", param)
        if len(body.messages) > limits.max_messages:
            raise too_large(
                "the number of messages", len(body.messages), limits.max_messages,
                "max_messages", "messages",
            )  # fmt: skip
        stops = [body.stop] if isinstance(body.stop, str) else body.stop or []
        if len(stops) > limits.max_stop_sequences:
            raise too_large(
                "the number of stop sequences", len(stops), limits.max_stop_sequences,
                "max_stop_sequences", "stop",
            )  # fmt: skip
        for stop in stops:  # an empty one is refused with the answer's options
            if len(stop) > limits.max_stop_length:
                raise too_large(
                    "a stop sequence's length", len(stop), limits.max_stop_length,
                    "max_stop_length", "stop",
                )  # fmt: skip
        tools = body.tools or []
        if len(tools) > limits.max_tools:
            raise too_large(
                "the number of tools", len(tools), limits.max_tools, "max_tools", "tools"
            )

    async def check_prompt(
        self,
        members: Sequence[Member],
        messages: Sequence[Message],
        tools: Sequence[Tool],
        max_tokens: int,
    ) -> None:
        """Refuse a prompt that is longer than ``--max-input-tokens`` or leaves a member's
        context no room for an answer of ``max_tokens`` (the request's, else the server's
        default: an answer that reached a member's context's end would fail there), counted
        in each member's own tokenizer; first, by its characters, a prompt far past either
        limit. A member on an OpenAI-style server counts a prompt only by answering it, so it
        is not counted here (its server checks the prompt itself)."""
        counted = [m for m in members if m.kind != "openai"]
        limit = self.limits.max_input_tokens
        rooms = [c - max_tokens for c in (await contexts(counted)).values() if c is not None]
        most = min([*rooms, *([limit] if limit else [])], default=None)
        if most is not None:
            check_characters(messages, tools, max(most, 1))
        for label, size in (await prompt_sizes(counted, messages, tools)).items():
            if limit is not None and size.tokens > limit:
                raise context_length(
                    f"the prompt is {size.tokens} tokens for member {label!r}, more than this "
                    f"server's limit of {limit} ({option_name('max_input_tokens')}); shorten the "
                    f"conversation, or ask the operator to raise {option_name('max_input_tokens')}"
                )
            if size.context is not None and size.tokens + max_tokens > size.context:
                raise context_length(
                    f"member {label!r} holds {size.context} tokens, and the prompt is "
                    f"{size.tokens} of its tokens with max_tokens={max_tokens} for the "
                    f"answer (the request's, else this server's --max-tokens; "
                    f"{size.tokens + max_tokens} in all); shorten the conversation or send "
                    "a smaller max_tokens"
                )


def check_characters(messages: Sequence[Message], tools: Sequence[Tool], most: int) -> None:
    """Refuse, by its length in characters, a prompt that cannot be ``most`` tokens or
    fewer in any tokenizer: tokenising it would cost a core seconds for nothing."""
    characters = sum(len(m.get("content") or "") for m in messages)
    characters += len(json.dumps(list(tools))) if tools else 0
    if characters > CHARACTERS_PER_TOKEN * most:
        raise context_length(
            f"the prompt is {characters} characters, far more than the {most} tokens it "
            f"may have on this server (a token holds at most about {CHARACTERS_PER_TOKEN} "
            "characters of text); shorten the conversation"
        )


def context_length(message: str) -> APIError:
    return APIError(400, message, "invalid_request_error", "context_length_exceeded", "messages")
