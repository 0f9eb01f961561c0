"""Members behind an OpenAI-style ``/v1/completions`` server: vLLM, llama-cpp-python.

A session keeps the member's context as text (the rendered conversation plus the accepted
segments), which every such server accepts.

- Drafting is a completion of the context with ``max_tokens=window``; ``finish_reason``
  ``"stop"`` means the member ended its turn. The repetition penalty goes under both
  servers' names (each ignores the other's): vLLM's reads the whole context,
  llama-cpp-python's only the tokens it drafts.
- Scoring is a completion of context + candidate with ``echo``, ``logprobs`` and one new
  token. The echoed prompt tokens come with their log-probs; the candidate's are those after
  the echoed tokens' common start with the context's own (echoed when it was accepted), so
  a token that merges across the join is the candidate's, as on every backend.
- Accepting a segment echoes the new context, unless this round scored that very text: its
  scoring echo is the new context's, so the round's winner costs no request.
- llama-cpp-python returns each echoed token with the log-prob of the token *after* it
  unless the prompt starts with the model's BOS token. A check at the first request finds
  this (a counting text then scores near -12 instead of near 0) and starts every prompt
  with the BOS token of the member's tokenizer.
- The echo covers the whole context, so scoring a candidate costs log-probs over the whole
  context (llama-cpp-python builds each echoed token's in Python); the member says so once,
  at its first check.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.types import Draft, Fits, Message, Sampling, Score, Scoring, Segment, Tool
from ..errors import MemberServerError
from ..members import Member
from .drafting import common_prefix, finish_draft
from .http import Caller, RemoteClient, score_each, served_model
from .template import ChatTemplate, member_template

NO_ECHO_LOGPROBS = (
    "the server returns no log-probs for echoed prompt tokens, which scoring needs; "
    "llama-cpp-python needs --logits_all true, vLLM needs a version that accepts echo "
    "with logprobs"
)

REREADS = (
    "member %r: an OpenAI-style server gives the log-probs of given tokens only by echoing "
    "the whole prompt, so every candidate costs log-probs over the whole context; for long "
    "prompts serve the model with vLLM (a vllm+ member)"
)

log = logging.getLogger(__name__)

ALIGNMENT_PROBE: list[Message] = [{"role": "user", "content": "Count from 1 to 20."}]
COUNTING = ", ".join(str(n) for n in range(1, 21))
"""An answer every language model finds near certain once it is under way."""

ALIGNED = -4.0
"""Mean log-prob of the counting's second half above which the server's echoed log-probs
belong to their own tokens (measured: about -0.05 when they do, -12 when shifted by one)."""


@dataclass(frozen=True)
class Echo:
    """A prompt as the server read it: its tokens' text and log-probs (the first has none),
    and its length in tokens. The server may leave tokens out of the lists (llama-cpp-python
    drops BOS tokens), but never at the end."""

    tokens: list[str]
    logprobs: list[float | None]
    count: int


class OpenAICompletionsBackend:
    """One completions server: its connection pool, served model and chat template."""

    context_tokens = None
    """An OpenAI-style server does not say how long its context is."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.client = RemoteClient(member, member.source)
        self.template: ChatTemplate = member_template(member)
        self.model = member.model or ""
        self.lead = ""
        """Text every prompt starts with: the BOS token where the server needs it there."""
        self._checked = False

    async def ready(self) -> None:
        """Check once that the server serves the model and echoes prompt log-probs that
        belong to their tokens. Requests that start together may both check; that is
        harmless."""
        if not self._checked:
            await self._check()
            if not self._checked:  # of requests that checked together, one says so
                log.warning(REREADS, self.member.label)
            self._checked = True

    async def _check(self) -> None:
        label, url = self.member.label, self.member.source
        not_openai = (
            f"member {label!r}: {url} is not an OpenAI-style API root such as http://host:8000/v1"
        )
        self.model = (await served_model(self.client, "/models", self.model, not_openai))["id"]
        if not await self._aligned():
            if self.template.bos and await self._aligned(lead=self.template.bos):
                self.lead = self.template.bos
            else:
                raise MemberServerError(
                    f"member {label!r}: the server's echoed log-probs do not belong to their "
                    "tokens (llama-cpp-python shifts them by one token unless the prompt "
                    "starts with the model's BOS token); give the member tokenizer= (its "
                    "model folder or .gguf) so that prompts can start with it"
                )

    async def _aligned(self, lead: str = "") -> bool:
        """Whether the echoed log-probs of a counting answer are those of its own tokens."""
        prompt = self.template.render(ALIGNMENT_PROBE) + COUNTING
        echo = await self.echo(self.client, lead + prompt)
        logprobs = echo.logprobs
        if len(logprobs) < 4 or len(echo.tokens) != len(logprobs) or None in logprobs[1:]:
            raise MemberServerError(f"member {self.member.label!r}: {NO_ECHO_LOGPROBS}")
        tail = [v for v in logprobs[len(logprobs) // 2 :] if v is not None]
        return math.fsum(tail) / len(tail) > ALIGNED

    def prompt(self, context: str) -> str:
        """The text sent for a context: led by :attr:`lead` where it is not already."""
        return context if context.startswith(self.lead) else self.lead + context

    async def complete(self, client: Caller, context: str, **parameters: Any) -> dict[str, Any]:
        body = {"model": self.model, "prompt": self.prompt(context), **parameters}
        response = await client.post("/completions", body)
        return response

    async def echo(self, client: Caller, context: str) -> Echo:
        """The prompt's tokens as the server echoes them (without the one it generates)."""
        response = await self.complete(
            client, context, max_tokens=1, echo=True, logprobs=1, temperature=0
        )
        logprobs = response["choices"][0].get("logprobs") or {}
        usage = response.get("usage") or {}
        end = -int(usage.get("completion_tokens", 0)) or None
        return Echo(
            [str(t) for t in logprobs.get("tokens") or []][:end],
            list(logprobs.get("token_logprobs") or [])[:end],
            int(usage.get("prompt_tokens", 0)),
        )

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        await self.ready()
        return await self._prompt_tokens(self.template.render(messages, tools))

    async def count_text(self, text: str) -> int:
        """Tokens of ``text`` as the server counts a prompt (less the BOS it leads with)."""
        await self.ready()
        return await self._prompt_tokens(text) - bool(self.lead)

    async def _prompt_tokens(self, text: str) -> int:
        response = await self.complete(self.client, text, max_tokens=1, temperature=0)
        return int((response.get("usage") or {}).get("prompt_tokens", 0))

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> OpenAICompletionsSession:
        await self.ready()
        client = self.client.answering(answer)
        context = self.template.render(messages, tools)
        return OpenAICompletionsSession(self, client, context, await self.echo(client, context))

    async def aclose(self) -> None:
        await self.client.aclose()


class OpenAICompletionsSession:
    """One request's context on a completions member."""

    runs_on = "openai"

    def __init__(
        self, backend: OpenAICompletionsBackend, client: Caller, context: str, echo: Echo
    ) -> None:
        self.backend = backend
        self.client = client
        """The backend's client as this answer's (its session header)."""
        self.context = context
        self.echoed = echo
        """The context as the server reads it."""
        self.prompt_tokens = echo.count
        self.scored: dict[str, Echo] = {}
        """This round's scoring echoes, by the text each read (context + candidate)."""

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        response = await self.backend.complete(
            self.client,
            self.context,
            max_tokens=window,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            # llama-cpp-python's name (its default is 1.1, not none) and vLLM's.
            repeat_penalty=sampling.repeat_penalty,
            repetition_penalty=sampling.repeat_penalty,
            seed=seed % 2**32,
            stop=list(self.backend.template.stop),
        )
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        tokens = int(usage.get("completion_tokens", 0))
        return finish_draft(choice["text"], tokens, choice.get("finish_reason") == "stop", ())

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        return await score_each(self.backend.member, candidates, scoring, self._score)

    async def _score(self, candidate: Segment) -> Score:
        ending = self.backend.template.ending if candidate.finished else ""
        text = candidate.text + ending
        if not text:
            raise ValueError("cannot score an empty candidate that does not end the turn")
        echo = await self.backend.echo(self.client, self.context + text)
        self.scored[self.context + text] = echo
        start = common_prefix(self.echoed.tokens, echo.tokens)
        mine = [v for v in echo.logprobs[start:] if v is not None]
        if not mine or len(mine) < len(echo.logprobs) - start:
            raise MemberServerError(f"member {self.backend.member.label!r}: {NO_ECHO_LOGPROBS}")
        return Score.of(mine)

    async def accept(self, segment: Segment) -> int:
        before = self.echoed.count
        self.context += segment.text
        self.echoed = self.scored.get(self.context) or await self.backend.echo(
            self.client, self.context
        )
        self.scored = {}
        return self.echoed.count - before

    async def aclose(self) -> None:
        """Nothing to release: the connection pool belongs to the backend."""
