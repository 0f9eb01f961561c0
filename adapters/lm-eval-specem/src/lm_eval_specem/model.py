"""SpecEMLM: a specem ensemble as an lm-evaluation-harness model, registered as ``specem``.

``--model_args members=smollm2;qwen2.5-coder,policy=paper,max_tokens=256``: members are
separated by ``;`` (the harness splits model_args on ``,``); every other key is a call
argument as every specem front end takes it (a :class:`~specem_chain.RequestSettings`
field or an answer option such as ``stop``), the default of every request, or one of
``backend`` and ``dtype`` (set on every member that runs in this process),
``num_concurrent`` and ``feedback``: ``none`` (default) starts every answer from uniform
weights; ``task`` carries the members' weights from each answer to the next over the run
(a :class:`~specem_chain.Feedback`, as a chat model given one does). The
harness's ``--device`` (default ``cuda:0``) places the members that run in this process
when that device is there, else they stay on the CPU.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from specem_chain import Feedback, Member, RequestSettings, open_request
from specem_chain.answer_formats import AnswerOptions
from specem_chain.engine.types import Message, Sampling, Segment
from specem_chain.members import ensemble_name, member_list
from specem_chain.models import DEFAULT_MEMBERS
from specem_chain.request import member_session, merge_call
from specem_chain.sync import run_sync

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

MEMBER_SETTINGS = ("backend", "dtype")
"""Member fields a model arg sets on every member that runs in this process."""
GENERATION_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "seed")
"""The generation kwargs a task may give; others are ignored with a warning."""
HARNESS_ARGS = ("batch_size", "max_batch_size")
"""What the harness passes to every model; requests run as ``num_concurrent`` says."""


class ChatHistory(str):
    """A conversation from :meth:`SpecEMLM.apply_chat_template`, kept as JSON text: each
    member renders it with its own chat template."""

    @property
    def messages(self) -> list[Message]:
        return json.loads(self)


@register_model("specem")
class SpecEMLM(LM):
    """Several models answer together, one segment at a time (SpecEM).

    ``generate_until`` runs one specem request per harness request; ``loglikelihood`` is
    the members' weighted log-probability of the continuation as the start of their answer.
    """

    def __init__(
        self,
        members: str | Sequence[str | Member] = tuple(DEFAULT_MEMBERS),
        num_concurrent: int = 1,
        device: str | None = None,
        feedback: str = "none",
        **options: Any,
    ) -> None:
        super().__init__()
        on_members = {k: options.pop(k) for k in MEMBER_SETTINGS if options.get(k) is not None}
        for name in HARNESS_ARGS:
            options.pop(name, None)
        own = ("members (separated by ';')", "num_concurrent", "feedback", *MEMBER_SETTINGS)
        self.settings, self.options = merge_call(
            RequestSettings(), options, what="model_args", also=own
        )
        if feedback not in ("task", "none"):
            raise ValueError(f"feedback is 'task' or 'none', not {feedback!r}")
        if num_concurrent < 1:
            raise ValueError(f"num_concurrent must be at least 1, got {num_concurrent}")
        if available(device):
            on_members["device"] = device
        self.members = parse_members(members, on_members)
        self.num_concurrent = num_concurrent
        self.feedback = Feedback() if feedback == "task" else None
        self._ignored: set[str] = set()

    @property
    def tokenizer_name(self) -> str:
        return ensemble_name(self.members)

    def chat_template(self, chat_template: bool | str = False) -> str:
        return "each member's own chat template"

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        return ChatHistory(json.dumps(chat_history, ensure_ascii=False))

    # -- generate_until ----------------------------------------------------------------

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """One specem answer per request: the task's ``until`` as stop sequences,
        ``max_gen_toks`` as max_tokens, ``do_sample: false`` as temperature 0 (else its
        ``temperature``), and a seed of its own derived from the base seed and the request."""
        seen: dict[int, int] = {}
        calls = []
        for request in requests:
            repeat = seen[id(request)] = seen.get(id(request), -1) + 1
            calls.append(self.specem_request(request, repeat))
        answers = run_sync(self._each(calls, self._generate, "specem generate_until", disable_tqdm))
        for request, answer in zip(requests, answers):
            self.cache_hook.add_partial("generate_until", request.args, answer)
        return answers

    def specem_request(
        self, request: Instance, repeat: int = 0
    ) -> tuple[list[Message], RequestSettings, AnswerOptions]:
        """The conversation, settings and answer options that a ``generate_until`` request
        becomes (``repeat``: which of the request's repeats it is)."""
        context, gen_kwargs = request.args[0], dict(request.args[1])
        ignored = {k for k in gen_kwargs if k not in GENERATION_KWARGS} - self._ignored
        if ignored:
            log.warning("specem ignores these generation kwargs: %s", sorted(ignored))
            self._ignored |= ignored
        until = gen_kwargs.get("until") or []
        stop = [until] if isinstance(until, str) else [s for s in until if s]
        overrides: dict[str, Any] = {}
        if gen_kwargs.get("max_gen_toks") is not None:
            overrides["max_tokens"] = int(gen_kwargs["max_gen_toks"])
        if gen_kwargs.get("do_sample") is False:
            overrides["temperature"] = 0.0
        elif gen_kwargs.get("temperature") is not None:
            overrides["temperature"] = float(gen_kwargs["temperature"])
        base = gen_kwargs.get("seed", self.settings.seed)
        overrides["seed"] = request_seed(base or 0, request, repeat)
        settings, options = merge_call(
            self.settings, {**overrides, "stop": stop}, stop=self.options.stop
        )
        return conversation(context), settings, replace(self.options, stop=options.stop)

    async def _generate(self, call: tuple[list[Message], RequestSettings, AnswerOptions]) -> str:
        messages, settings, options = call
        async with open_request(
            self.members, messages, settings, options, feedback=self.feedback
        ) as request:
            async for _ in request:
                pass
        return request.answer.text

    # -- log-likelihood --------------------------------------------------------------

    def loglikelihood(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        """For each ``(context, continuation)``: the members' log-probabilities of the
        continuation as the start of their answer to the context, averaged with the
        members' (uniform) starting weights; and whether it is greedy, which is reported
        when it is every member's greedy continuation (then specem writes it greedily)."""
        if not any(m.verifies for m in self.members):
            raise ValueError(
                "log-likelihoods need a member that verifies (role 'both' or 'verifier')"
            )
        contexts: dict[tuple[bool, str], list[int]] = {}
        for index, request in enumerate(requests):
            context = request.args[0]
            contexts.setdefault((isinstance(context, ChatHistory), context), []).append(index)
        groups = [
            (requests[found[0]].args[0], [requests[i].args[1] for i in found])
            for found in contexts.values()
        ]
        scored = run_sync(self._each(groups, self._score, "specem loglikelihood", disable_tqdm))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        for found, values in zip(contexts.values(), scored):
            for index, value in zip(found, values):
                results[index] = value
        for request, result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", request.args, result)
        return results

    async def _score(self, group: tuple[str, list[str]]) -> list[tuple[float, bool]]:
        context, continuations = group
        verifiers = [m for m in self.members if m.verifies]
        rows = await asyncio.gather(
            *(member_loglikelihood(m, conversation(context), continuations) for m in verifiers)
        )
        return [
            (sum(row[j][0] for row in rows) / len(rows), all(row[j][1] for row in rows))
            for j in range(len(continuations))
        ]

    def loglikelihood_rolling(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[float]:
        raise NotImplementedError(
            "specem does not compute rolling log-likelihoods (perplexity tasks such as "
            "wikitext): its members are chat models that score text as the answer to a "
            "rendered chat turn, not raw text from its start. Evaluate perplexity on one "
            "member at a time with `--model hf --model_args pretrained=<its folder>`."
        )

    # -- running requests --------------------------------------------------------------

    async def _each(
        self,
        calls: Sequence[T],
        work: Callable[[T], Awaitable[R]],
        description: str,
        disable_tqdm: bool,
    ) -> list[R]:
        """``work`` on every call, at most ``num_concurrent`` at once, results in order."""
        limit = asyncio.Semaphore(self.num_concurrent)
        bar = tqdm(total=len(calls), desc=description, disable=disable_tqdm)

        async def one(call: T) -> R:
            async with limit:
                result = await work(call)
            bar.update(1)
            return result

        tasks = [asyncio.ensure_future(one(call)) for call in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            bar.close()


async def member_loglikelihood(
    member: Member, messages: list[Message], continuations: Sequence[str]
) -> list[tuple[float, bool]]:
    """One member's total log-probability of each continuation (its Score's mean times its
    tokens) and whether its greedy continuation starts with it."""
    async with member_session(member, messages) as session:
        scores = await session.score([Segment(c) for c in continuations], "mean_logprob")
        window = max([s.tokens for s in scores] + [1])
        greedy = await session.draft(window, Sampling(temperature=0.0), seed=0)
    return [(s.mean * s.tokens, greedy.text.startswith(c)) for s, c in zip(scores, continuations)]


def parse_members(
    members: str | Sequence[str | Member], on_members: dict[str, Any]
) -> list[Member]:
    """Members from a ``;``-separated string or a list; ``on_members`` set on every member
    that runs in this process."""
    specs = members.split(";") if isinstance(members, str) else list(members)
    if not specs or any(isinstance(s, str) and not s.strip() for s in specs):
        raise ValueError(f"give members separated by ';', got {members!r}")
    parsed = member_list([s.strip() if isinstance(s, str) else s for s in specs])
    return [
        Member(**{**m.model_dump(exclude_unset=True), **on_members})
        if on_members and not m.remote
        else m
        for m in parsed
    ]


def available(device: str | None) -> bool:
    """Whether ``device`` (a torch device) is there; "cpu", the members' default, is not
    set again."""
    if not device or device == "cpu":
        return False
    try:
        import torch
    except ImportError:  # members on servers only
        return False
    if device.startswith("cuda"):
        return torch.cuda.is_available()
    return device == "mps" and torch.backends.mps.is_available()


def conversation(context: str) -> list[Message]:
    """The harness's context as a conversation: the chat history when the harness applied
    the chat template, else the whole context as one user turn."""
    if isinstance(context, ChatHistory):
        messages = context.messages
        if messages and messages[-1]["role"] == "assistant":
            raise ValueError(
                "the task starts the answer itself (an assistant turn last, e.g. a "
                "gen_prefix); specem writes the whole answer: run it without "
                "--apply_chat_template"
            )
        return messages
    return [{"role": "user", "content": context}]


def request_seed(base: int, request: Instance, repeat: int) -> int:
    """A seed of the request's own, the same whatever order or batch it runs in: a hash of
    the base seed, the task, the document and the repeat."""
    key = f"{base}|{request.task_name}|{request.doc_id}|{request.idx}|{repeat}"
    return zlib.crc32(key.encode())
