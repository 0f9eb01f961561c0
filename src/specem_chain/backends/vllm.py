"""Members served by vLLM's OpenAI-compatible server, given nothing but its address.

The server does what a local member's tokenizer and chat template do, so the member needs
no files of its own, and its context is token ids, sent as token ids:

- ``POST /tokenize`` with the messages renders the conversation with the server's own chat
  template (the tools too, where the template writes them; else they go in as text). The
  context is the server's tokenizer's reading of the rendered prompt and the accepted
  answer as one text (``/detokenize`` gives the prompt's text), as on every backend, so a
  token that merges across a segment's join is read merged.
- Drafting is ``POST /v1/completions`` with the context's ids as the prompt, the member's
  sampling and seed, stopping at the end-of-turn token the template ends a turn with.
- Scoring sends every candidate in one batch of token-id prompts (context + candidate, and
  the end-of-turn token for a finished one) with ``prompt_logprobs``: the log-probs of the
  candidate's tokens, those after their common start with the context. A server that does
  not return ``prompt_logprobs`` is asked with ``echo`` and ``logprobs`` instead; which one
  scored is in the answer's provenance (``backends``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Literal

from ..engine.types import Draft, Fits, Message, Sampling, Score, Scoring, Segment, Tool
from ..errors import MemberServerError
from ..members import Member
from .drafting import check_prompt, common_prefix, finish_draft
from .http import RemoteClient, served_model
from .template import (
    PLAIN_END,
    PLAIN_STOP,
    PROBE_CONVERSATION,
    PROBE_TOOL,
    end_of_turn_text,
    fold_system,
    plain_transcript,
    tools_as_text,
)

Route = Literal["prompt_logprobs", "echo"]
"""How the server gives a prompt's log-probs."""

NO_LOGPROBS = (
    "the server returns no log-probs of prompt tokens (neither prompt_logprobs nor echo "
    "with logprobs), which scoring needs"
)


def api_root(url: str) -> str:
    """The server's address without a trailing ``/v1``: vLLM serves ``/tokenize`` beside
    ``/v1``."""
    return url.rstrip("/").removesuffix("/v1")


class VLLMBackend:
    """One vLLM server: its connection pool, and what its first check learnt (the served
    model, its context length, its chat template's end of turn and tool support, and how
    it gives prompt log-probs)."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.client = RemoteClient(member, api_root(member.source))
        self.model = member.model or ""
        self.max_model_len = 0
        self.end_of_turn = ""
        """The marker that ends the member's turn in its template (``"<|im_end|>"``)."""
        self.end_of_turn_ids: list[int] = []
        """The marker's tokens, which a finished candidate is scored with."""
        self.plain = False
        """The model has no chat template: the conversation is the plain transcript."""
        self.native_tools = False
        self.route: Route = "prompt_logprobs"
        self._checked = False
        self._lock = asyncio.Lock()

    @property
    def label(self) -> str:
        return self.member.label

    @property
    def stop(self) -> tuple[str, ...]:
        """Text that ends the member's turn when it appears in a draft."""
        if self.plain:
            return PLAIN_STOP
        return (self.end_of_turn,) if self.end_of_turn else ()

    async def ready(self) -> None:
        """Check once that the address is a vLLM server that serves the model and returns
        prompt log-probs, and learn its template's end of turn and tool support."""
        async with self._lock:
            if not self._checked:
                await self._check()
                self._checked = True

    async def _check(self) -> None:
        not_vllm = f"member {self.label!r}: {self.member.source} is not a vLLM server"
        model = await served_model(self.client, "/v1/models", self.model, not_vllm)
        self.model = model["id"]
        self.max_model_len = int(model.get("max_model_len") or 0)
        try:
            await self.tokenize("Hi")
        except MemberServerError as error:
            raise MemberServerError(
                f"{not_vllm}: POST /tokenize failed ({error}); for another OpenAI-style "
                "server use an openai+ member"
            ) from None
        await self._learn_template()
        self.route = await self._prompt_logprobs_route()

    async def _learn_template(self) -> None:
        try:
            probe = await self.render_ids(PROBE_CONVERSATION, generation_prompt=False)
        except MemberServerError:
            self.plain = True  # vLLM refuses messages for a model without a chat template
            return
        self.end_of_turn = end_of_turn_text(await self.detokenize(probe))
        self.end_of_turn_ids = await self.tokenize(self.end_of_turn) if self.end_of_turn else []
        with_tool = await self.render_ids(PROBE_CONVERSATION[:1], tools=[PROBE_TOOL])
        self.native_tools = "specem_probe_tool" in await self.detokenize(with_tool)

    async def _prompt_logprobs_route(self) -> Route:
        """How the server gives prompt log-probs, found on a two-token probe."""
        probe = await self.tokenize("Hello world")
        for route in ("prompt_logprobs", "echo"):
            try:
                [logprobs] = await self.prompt_logprobs([probe], route)  # type: ignore[arg-type]
            except (MemberServerError, KeyError, TypeError, ValueError):
                continue
            if len(logprobs) == len(probe) and all(v is not None for v in logprobs[1:]):
                return route  # type: ignore[return-value]
        raise MemberServerError(f"member {self.label!r}: {NO_LOGPROBS}")

    # -- the server's endpoints --------------------------------------------------------

    async def tokenize(self, text: str) -> list[int]:
        """``text`` in the server's tokenizer, special tokens written in it read as such
        and none added."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return list((await self.client.post("/tokenize", body))["tokens"])

    async def detokenize(self, ids: Sequence[int]) -> str:
        body = {"model": self.model, "tokens": list(ids)}
        return str((await self.client.post("/detokenize", body))["prompt"])

    async def render_ids(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] = (),
        *,
        generation_prompt: bool = True,
    ) -> list[int]:
        """The conversation's ids, rendered by the server's chat template; a template that
        rejects a system turn gets it folded into the first user turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "add_generation_prompt": generation_prompt,
        }
        if tools:
            body["tools"] = list(tools)
        try:
            return list((await self.client.post("/tokenize", body))["tokens"])
        except MemberServerError:
            if not messages or messages[0]["role"] != "system":
                raise
            body["messages"] = fold_system(messages)
            return list((await self.client.post("/tokenize", body))["tokens"])

    async def prompt(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> list[int]:
        """The ids of the conversation, ready for the answer (tools as the template takes
        them, or as text)."""
        await self.ready()
        if self.plain:
            return await self.tokenize(plain_transcript(tools_as_text(messages, tools)))
        if self.native_tools:
            return await self.render_ids(messages, tools)
        return await self.render_ids(tools_as_text(messages, tools))

    async def complete(self, prompts: list[list[int]] | list[int], **body: Any) -> dict[str, Any]:
        """One completion request's answer, its choices in the prompts' order."""
        response = await self.client.post(
            "/v1/completions", {"model": self.model, "prompt": prompts, **body}
        )
        response["choices"].sort(key=lambda c: c.get("index", 0))
        return response

    async def prompt_logprobs(
        self, prompts: list[list[int]], route: Route | None = None
    ) -> list[list[float | None]]:
        """Each prompt's tokens' log-probs (the first has none), in one request."""
        route = route or self.route
        if route == "prompt_logprobs":
            response = await self.complete(prompts, max_tokens=1, temperature=0, prompt_logprobs=0)
            choices = response["choices"]
            return [
                [None if p is None else _logprob(p, t) for p, t in zip(c["prompt_logprobs"], ids)]
                for c, ids in zip(choices, prompts)
            ]
        response = await self.complete(prompts, max_tokens=1, temperature=0, echo=True, logprobs=0)
        choices = response["choices"]
        return [
            list(c["logprobs"]["token_logprobs"][: len(ids)]) for c, ids in zip(choices, prompts)
        ]

    # -- the Backend protocol ----------------------------------------------------------

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        return len(await self.prompt(messages, tools))

    async def count_text(self, text: str) -> int:
        await self.ready()
        return len(await self.tokenize(text))

    async def open(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> VLLMSession:
        ids = await self.prompt(messages, tools)
        holder = f"whose server accepts {self.max_model_len}"
        check_prompt(self.label, len(ids), self.max_model_len - 1, holder)
        text = await self.detokenize(ids)
        joined = await self.tokenize(text) == ids
        return VLLMSession(self, ids, text if joined else None)

    async def aclose(self) -> None:
        await self.client.aclose()


def _logprob(position: dict[str, Any], token: int) -> float:
    """The log-prob of ``token`` among a position's ``prompt_logprobs``."""
    return float(position[str(token)]["logprob"])


class VLLMSession:
    """One request's context on a vLLM member: token ids."""

    def __init__(self, backend: VLLMBackend, ids: list[int], prompt_text: str | None) -> None:
        self.backend = backend
        self.prompt_ids = ids
        self.prompt_text = prompt_text
        """The prompt's text when the server reads it back as the prompt's ids (then the
        context is the reading of prompt and answer as one text); None: the answer is
        read on its own after the prompt's ids."""
        self.answer = ""
        self.ids = list(ids)
        self.prompt_tokens = len(ids)

    @property
    def runs_on(self) -> str:
        return f"vllm ({self.backend.route})"

    async def _read(self, answer: str) -> list[int]:
        """The context's ids with ``answer`` after the prompt, by the one context rule."""
        if self.prompt_text is not None:
            return await self.backend.tokenize(self.prompt_text + answer)
        return self.prompt_ids + (await self.backend.tokenize(answer) if answer else [])

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        backend = self.backend
        room = backend.max_model_len - len(self.ids)
        body: dict[str, Any] = {
            "max_tokens": max(1, min(window, room)),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "repetition_penalty": sampling.repeat_penalty,  # over the whole sequence
            "seed": seed % 2**63,
        }
        stops = backend.stop
        if len(backend.end_of_turn_ids) == 1:
            body["stop_token_ids"] = backend.end_of_turn_ids
        elif stops:
            body["stop"] = list(stops)
        response = await backend.complete(self.ids, **body)
        [choice] = response["choices"]
        tokens = int((response.get("usage") or {}).get("completion_tokens", 0))
        return finish_draft(choice["text"], tokens, choice.get("finish_reason") == "stop", stops)

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        if scoring != "mean_logprob":
            raise MemberServerError(
                f"member {self.backend.label!r} is remote; servers return log-probs, "
                "not logits: use scoring='mean_logprob'"
            )
        plain = self.backend.plain
        ending = PLAIN_END if plain else ""
        read = await asyncio.gather(
            *(self._read(self.answer + c.text + (ending if c.finished else "")) for c in candidates)
        )
        prompts, starts = [], []
        for candidate, ids in zip(candidates, read):
            start = common_prefix(self.ids, ids)
            if candidate.finished and not plain:
                ids = [*ids, *self.backend.end_of_turn_ids]
            if start == len(ids):
                raise ValueError("cannot score an empty candidate that does not end the turn")
            prompts.append(ids)
            starts.append(max(start, 1))
        scores = []
        for logprobs, start in zip(await self.backend.prompt_logprobs(prompts), starts):
            mine = logprobs[start:]
            if any(v is None for v in mine):
                raise MemberServerError(f"member {self.backend.label!r}: {NO_LOGPROBS}")
            scores.append(Score(math.fsum(mine) / len(mine), len(mine)))  # type: ignore[arg-type]
        return scores

    async def accept(self, segment: Segment) -> int:
        before = len(self.ids)
        self.answer += segment.text
        self.ids = await self._read(self.answer)
        return len(self.ids) - before

    async def aclose(self) -> None:
        """Nothing to release: the connection pool belongs to the backend."""
