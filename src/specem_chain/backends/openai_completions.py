"""Members behind an OpenAI-style ``/v1/completions`` server: vLLM, llama-cpp-python.

A session keeps the member's context as text (the rendered conversation plus the accepted
segments), which every such server accepts.

- Drafting is a completion of the context with ``max_tokens=window``; ``finish_reason``
  ``"stop"`` means the member ended its turn.
- Scoring is a completion of context + candidate with ``echo``, ``logprobs`` and one new
  token: the echoed prompt tokens come with their log-probs and character offsets, and the
  tokens that end after the context are the candidate's.
- Token counts come from the server's ``usage.prompt_tokens``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from ..errors import MemberServerError
from ..members import Member, Sampling
from .base import Draft, Scoring, Segment
from .chat import Message, Tool
from .http import RemoteClient
from .templates import ChatTemplate, member_template

NO_ECHO_LOGPROBS = (
    "the server returns no log-probs for echoed prompt tokens, which scoring needs; "
    "llama-cpp-python needs --logits_all true, vLLM needs a version that accepts echo "
    "with logprobs"
)


class OpenAICompletionsBackend:
    """One completions server: its connection pool, served model and chat template."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.client = RemoteClient(member, member.source)
        self.template: ChatTemplate = member_template(member)
        self.model = member.model or ""
        self._checked = False

    async def ready(self) -> None:
        """Check once that the server serves the model and echoes prompt log-probs.
        Requests that start together may both check; that is harmless."""
        if not self._checked:
            await self._check()
            self._checked = True

    async def _check(self) -> None:
        label, url = self.member.label, self.member.source
        not_openai = (
            f"member {label!r}: {url} is not an OpenAI-style API root such as http://host:8000/v1"
        )
        try:
            listing = await self.client.get("/models")
        except MemberServerError as error:
            raise MemberServerError(f"{not_openai} ({error})") from None
        if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            raise MemberServerError(f"{not_openai} (GET /models has no data list)")
        served = [str(m.get("id")) for m in listing["data"]]
        if not self.model:
            if not served:
                raise MemberServerError(f"member {label!r}: {url} serves no model")
            self.model = served[0]
        elif self.model not in served:
            raise MemberServerError(
                f"member {label!r}: {url} does not serve {self.model!r}; it serves {served}"
            )
        tokens = await self.echo("Hello world, hello")
        if not tokens or any(logprob is None for _, logprob in tokens[1:]):
            raise MemberServerError(f"member {label!r}: {NO_ECHO_LOGPROBS}")

    async def complete(self, prompt: str, **parameters: Any) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompt, **parameters}
        response = await self.client.post("/completions", body)
        return response

    async def echo(self, prompt: str) -> list[tuple[int, float | None]]:
        """The prompt's tokens as (character offset, log-prob) pairs."""
        response = await self.complete(prompt, max_tokens=1, echo=True, logprobs=1, temperature=0)
        logprobs = response["choices"][0].get("logprobs") or {}
        offsets = logprobs.get("text_offset") or []
        values = logprobs.get("token_logprobs") or []
        return [(o, v) for o, v in zip(offsets, values) if o < len(prompt)]

    async def count_tokens(self, prompt: str) -> int:
        response = await self.complete(prompt, max_tokens=1, temperature=0)
        return int(response["usage"]["prompt_tokens"])

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = ()
    ) -> OpenAICompletionsSession:
        await self.ready()
        context = self.template.render(messages, tools)
        return OpenAICompletionsSession(self, context, await self.count_tokens(context))

    async def aclose(self) -> None:
        await self.client.aclose()


class OpenAICompletionsSession:
    """One request's context on a completions member."""

    def __init__(self, backend: OpenAICompletionsBackend, context: str, tokens: int) -> None:
        self.backend = backend
        self.context = context
        self.tokens = tokens
        self.prompt_tokens = tokens

    async def draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        response = await self.backend.complete(
            self.context,
            max_tokens=window,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=seed % 2**32,
            stop=list(self.backend.template.stop),
        )
        choice = response["choices"][0]
        finished = choice.get("finish_reason") == "stop"
        text: str = choice["text"]
        if not finished:
            text = text.rstrip("\ufffd")  # a character whose bytes the window cut apart
        usage = response.get("usage") or {}
        return Draft(text=text, tokens=int(usage.get("completion_tokens", 0)), finished=finished)

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[float]:
        if scoring != "mean_logprob":
            raise MemberServerError(
                f"member {self.backend.member.label!r} is remote; servers return log-probs, "
                "not logits: use scoring='mean_logprob'"
            )
        return list(await asyncio.gather(*(self._score(c) for c in candidates)))

    async def _score(self, candidate: Segment) -> float:
        ending = self.backend.template.end_of_turn if candidate.finished else ""
        tokens = await self.backend.echo(self.context + candidate.text + ending)
        ends = [o for o, _ in tokens[1:]] + [math.inf]
        # A token belongs to the candidate when it ends after the context; a token that
        # merges across the junction is the candidate's.
        logprobs = [v for (_, v), end in zip(tokens, ends) if end > len(self.context)]
        if not logprobs:
            raise ValueError("cannot score an empty candidate that does not end the turn")
        if any(v is None for v in logprobs):
            raise MemberServerError(f"member {self.backend.member.label!r}: {NO_ECHO_LOGPROBS}")
        return math.fsum(logprobs) / len(logprobs)

    async def accept(self, segment: Segment) -> int:
        before = self.tokens
        self.context += segment.text
        self.tokens = await self.backend.count_tokens(self.context)
        return max(self.tokens - before, 1 if segment.text else 0)

    async def aclose(self) -> None:
        """Nothing to release: the connection pool belongs to the backend."""
