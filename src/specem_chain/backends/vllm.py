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
- Scoring needs the log-probs of the candidate's tokens (context + candidate, and the
  end-of-turn token for a finished one; the tokens after their common start with the
  context). vLLM skips its prefix cache for any request that asks for ``prompt_logprobs``
  (and for ``echo`` with ``logprobs``, which it turns into them), so those routes re-read
  the whole context for every candidate. The member asks instead for each of the
  candidate's tokens at a *generated* position: the prefix before the token is the prompt,
  one token is generated, and ``logprob_token_ids`` returns the listed tokens' log-probs
  there, from the raw logits (vLLM's default ``logprobs_mode``), as ``prompt_logprobs``
  does. Every prefix of every candidate of a round goes in one request (a prefix that two
  candidates share, once); each reads the context's cached blocks and computes only its
  last, partial block (vLLM caches whole blocks: 16 tokens on GPUs, 128 on its CPU
  build), and no full-vocabulary log-probs are built over the context. A server without
  ``logprob_token_ids`` is asked one prefix a request with ``allowed_token_ids`` (the
  sampled token is then the candidate's); one where neither gives the log-probs
  ``prompt_logprobs`` gives falls back to ``prompt_logprobs`` (else ``echo``) and says so
  once. :data:`ROUTES` lists them in that order; which one scored is in the answer's
  provenance (``backends``).

  A cached route computes each prefix's partial block, so after a context shorter than a
  block (or on a server without prefix caching) it computes far more than re-reading
  would: n prefixes of about L tokens against one prompt of L + n. Each round the member
  counts both (:func:`cached_cost`, :func:`rereading_cost`, with the block size and
  whether prefix caching is on, read once from the server's ``/metrics``) and re-reads
  where that computes fewer tokens.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

from ..engine.types import Draft, Fits, Message, Sampling, Score, Scoring, Segment, Tool
from ..errors import MemberServerError
from ..members import Member
from .drafting import check_prompt, common_prefix, finish_draft
from .http import Caller, RemoteClient, served_model
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

Route = Literal["logprob_token_ids", "allowed_token_ids", "prompt_logprobs", "echo"]
"""How the server gives the log-probs of a candidate's tokens."""

CACHED_ROUTES: tuple[Route, ...] = ("logprob_token_ids", "allowed_token_ids")
"""Routes that ask at generated positions, so each prefix reads the server's prefix cache."""

REREADING_ROUTES: tuple[Route, ...] = ("prompt_logprobs", "echo")
"""Routes that ask for prompt log-probs, which vLLM computes without its prefix cache."""

ROUTES = CACHED_ROUTES + REREADING_ROUTES
"""Every route, in the order the member prefers them."""

MAX_LOGPROB_TOKEN_IDS = 128
"""vLLM's limit on ``logprob_token_ids`` in one request."""

ROUTE_TOLERANCE = 1e-3
"""How far a cached route's log-probs may be from ``prompt_logprobs``' on the first check
(measured on vLLM 0.32.0: within 2e-5)."""

PROBE_TEXT = "Marmalade quartz sings; the seventh ferry counts pebbles."
"""The text whose tokens' log-probs every route is checked on: words no model finds
likely, so a server that ignores ``logprob_token_ids`` (and gives the top tokens instead)
cannot pass for one that takes it."""

log = logging.getLogger(__name__)

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
        self.route: Route = "logprob_token_ids"
        self.rereading: Route | None = None
        """The re-reading route the server answered on, which a round takes where it
        computes fewer tokens than :attr:`route` (see :meth:`cheaper_route`)."""
        self.block: int | None = None
        """The server's prefix-cache block size (0: prefix caching off; None: unknown)."""
        self._checked = False
        self._lock = asyncio.Lock()

    @property
    def label(self) -> str:
        return self.member.label

    @property
    def context_tokens(self) -> int | None:
        return self.max_model_len or None

    @property
    def stop(self) -> tuple[str, ...]:
        """Text that ends the member's turn when it appears in a draft."""
        if self.plain:
            return PLAIN_STOP
        return (self.end_of_turn,) if self.end_of_turn else ()

    async def ready(self) -> None:
        """Check once that the address is a vLLM server that serves the model and returns
        the log-probs scoring needs, and learn its template's end of turn, its tool
        support and its scoring route."""
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
            await self.tokenize(self.client, "Hi")
        except MemberServerError as error:
            raise MemberServerError(
                f"{not_vllm}: POST /tokenize failed ({error}); for another OpenAI-style "
                "server use an openai+ member"
            ) from None
        await self._learn_template()
        self.route = await self._scoring_route()
        self.block = cache_block(await self.client.text("/metrics"))

    async def _learn_template(self) -> None:
        try:
            probe = await self.render_ids(self.client, PROBE_CONVERSATION, generation_prompt=False)
        except MemberServerError:
            self.plain = True  # vLLM refuses messages for a model without a chat template
            return
        client = self.client
        self.end_of_turn = end_of_turn_text(await self.detokenize(client, probe))
        end = self.end_of_turn
        self.end_of_turn_ids = await self.tokenize(client, end) if end else []
        with_tool = await self.render_ids(client, PROBE_CONVERSATION[:1], tools=[PROBE_TOOL])
        self.native_tools = "specem_probe_tool" in await self.detokenize(client, with_tool)

    async def _scoring_route(self) -> Route:
        """The first route of :data:`ROUTES` that gives a probe's log-probs, a cached one
        only where it gives those ``prompt_logprobs`` gives (within
        :data:`ROUTE_TOLERANCE`). A route that re-reads the context is said once. Each
        route is probed only until the choice is known: the first re-reading route that
        answers, then the cached ones in turn."""
        probe = await self.tokenize(self.client, PROBE_TEXT)

        async def probed(route: Route) -> list[float] | None:
            try:
                [found] = await self.token_logprobs(self.client, [probe], [1], route)
            except (MemberServerError, KeyError, TypeError, ValueError, IndexError):
                return None
            return found

        truth, rereading = None, REREADING_ROUTES[0]
        for rereading in REREADING_ROUTES:
            if (truth := await probed(rereading)) is not None:
                self.rereading = rereading
                break
        for route in CACHED_ROUTES:
            found = await probed(route)
            if found is not None and (truth is None or _close(found, truth)):
                return route
        if truth is None:
            raise MemberServerError(f"member {self.label!r}: {NO_LOGPROBS}")
        log.warning(
            "member %r: %s scores with %s, which re-reads the whole context for every "
            "candidate (vLLM skips its prefix cache there); a vLLM whose completions take "
            "logprob_token_ids (0.32.0 does), with prefix caching on, scores from the cache",
            self.label,
            self.member.source,
            rereading,
        )
        return rereading

    # -- the server's endpoints --------------------------------------------------------

    async def tokenize(self, client: Caller, text: str) -> list[int]:
        """``text`` in the server's tokenizer, special tokens written in it read as such
        and none added. (Every endpoint's method takes the client to send it with: the
        backend's, or an answer's, :meth:`RemoteClient.answering`.)"""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return list((await client.post("/tokenize", body))["tokens"])

    async def detokenize(self, client: Caller, ids: Sequence[int]) -> str:
        body = {"model": self.model, "tokens": list(ids)}
        return str((await client.post("/detokenize", body))["prompt"])

    async def render_ids(
        self,
        client: Caller,
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
            return list((await client.post("/tokenize", body))["tokens"])
        except MemberServerError:
            if not messages or messages[0]["role"] != "system":
                raise
            body["messages"] = fold_system(messages)
            return list((await client.post("/tokenize", body))["tokens"])

    async def prompt(
        self, client: Caller, messages: Sequence[Message], tools: Sequence[Tool] = ()
    ) -> list[int]:
        """The ids of the conversation, ready for the answer (tools as the template takes
        them, or as text)."""
        await self.ready()
        if self.plain:
            return await self.tokenize(client, plain_transcript(tools_as_text(messages, tools)))
        if self.native_tools:
            return await self.render_ids(client, messages, tools)
        return await self.render_ids(client, tools_as_text(messages, tools))

    async def complete(
        self, client: Caller, prompts: list[list[int]] | list[int], **body: Any
    ) -> dict[str, Any]:
        """One completion request's answer, its choices in the prompts' order."""
        response = await client.post(
            "/v1/completions", {"model": self.model, "prompt": prompts, **body}
        )
        response["choices"].sort(key=lambda c: c.get("index", 0))
        return response

    def cheaper_route(self, prompts: list[list[int]], unique: list[tuple[int, ...]]) -> Route:
        """:attr:`route`, or the re-reading route where that computes fewer tokens for
        these prompts, whose distinct positions are ``unique`` (the block size known)."""
        if (
            self.route in CACHED_ROUTES
            and self.rereading
            and self.block is not None
            and rereading_cost(prompts) < cached_cost(unique, self.block)
        ):
            return self.rereading
        return self.route

    async def token_logprobs(
        self,
        client: Caller,
        prompts: list[list[int]],
        starts: list[int],
        route: Route | None = None,
    ) -> list[list[float]]:
        """The log-probs of each prompt's tokens from its start on (a start of at least
        1), every prompt in one request where the route allows; by default on the
        cheaper route (:meth:`cheaper_route`)."""
        wanted, unique = asked_positions(prompts, starts)
        route = route or self.cheaper_route(prompts, unique)
        if route in REREADING_ROUTES:
            every = await self._prompt_logprobs(client, prompts, route)
            read = [logprobs[start:] for logprobs, start in zip(every, starts)]
            if any(v is None for logprobs in read for v in logprobs):
                raise MemberServerError(f"member {self.label!r}: {NO_LOGPROBS}")
            return read  # type: ignore[return-value]
        positions = [(list(p[:-1]), p[-1]) for p in unique]
        if route == "logprob_token_ids":
            asks = _asks(positions)
            answers = await asyncio.gather(*(self._listed_logprobs(client, a) for a in asks))
            flat = [v for answer in answers for v in answer]
        else:
            allowed = (self._allowed_logprob(client, *p) for p in positions)
            flat = list(await asyncio.gather(*allowed))
        value = dict(zip(unique, flat))
        return [[value[p] for p in candidate] for candidate in wanted]

    async def _listed_logprobs(
        self, client: Caller, positions: list[tuple[list[int], int]]
    ) -> list[float]:
        """Each prefix's next-token log-prob of its token, in one request: every prefix a
        prompt, one generated token, the tokens listed in ``logprob_token_ids``."""
        listed = sorted({token for _, token in positions})
        response = await self.complete(
            client,
            [prefix for prefix, _ in positions],
            max_tokens=1,
            temperature=0,
            logprobs=1,
            logprob_token_ids=listed,
            return_tokens_as_token_ids=True,
        )
        found = []
        for choice, (_, token) in zip(response["choices"], positions):
            given = choice["logprobs"]["top_logprobs"][0]
            if len(given) < len(listed):
                raise ValueError(
                    f"{len(listed)} tokens listed in logprob_token_ids, {len(given)} given"
                )
            found.append(float(given[f"token_id:{token}"]))
        return found

    async def _allowed_logprob(self, client: Caller, prefix: list[int], token: int) -> float:
        """The prefix's next-token log-prob of ``token``, generated as the only token
        allowed (the log-prob of the raw logits, before the mask)."""
        response = await self.complete(
            client,
            prefix,
            max_tokens=1,
            temperature=0,
            logprobs=0,
            allowed_token_ids=[token],
            return_tokens_as_token_ids=True,
        )
        [choice] = response["choices"]
        logprobs = choice["logprobs"]
        if logprobs["tokens"][0] != f"token_id:{token}":
            raise ValueError(f"allowed_token_ids={[token]} generated {logprobs['tokens'][0]}")
        return float(logprobs["token_logprobs"][0])

    async def _prompt_logprobs(
        self, client: Caller, prompts: list[list[int]], route: Route
    ) -> list[list[float | None]]:
        """Each prompt's tokens' log-probs (the first has none), in one request."""
        if route == "prompt_logprobs":
            response = await self.complete(
                client, prompts, max_tokens=1, temperature=0, prompt_logprobs=0
            )
            choices = response["choices"]
            return [
                [None if p is None else _logprob(p, t) for p, t in zip(c["prompt_logprobs"], ids)]
                for c, ids in zip(choices, prompts)
            ]
        response = await self.complete(
            client, prompts, max_tokens=1, temperature=0, echo=True, logprobs=0
        )
        choices = response["choices"]
        return [
            list(c["logprobs"]["token_logprobs"][: len(ids)]) for c, ids in zip(choices, prompts)
        ]

    # -- the Backend protocol ----------------------------------------------------------

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        return len(await self.prompt(self.client, messages, tools))

    async def count_text(self, text: str) -> int:
        await self.ready()
        return len(await self.tokenize(self.client, text))

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> VLLMSession:
        client = self.client.answering(answer)
        ids = await self.prompt(client, messages, tools)
        holder = f"whose server accepts {self.max_model_len}"
        check_prompt(self.label, len(ids), self.max_model_len - 1, holder)
        text = await self.detokenize(client, ids)
        joined = await self.tokenize(client, text) == ids
        return VLLMSession(self, client, ids, text if joined else None)

    async def aclose(self) -> None:
        await self.client.aclose()


def _logprob(position: dict[str, Any], token: int) -> float:
    """The log-prob of ``token`` among a position's ``prompt_logprobs``."""
    return float(position[str(token)]["logprob"])


def asked_positions(
    prompts: list[list[int]], starts: list[int]
) -> tuple[list[list[tuple[int, ...]]], list[tuple[int, ...]]]:
    """Each prompt's positions from its start on, and every distinct one: a position is
    the ids up to and with its token; one that two candidates share (they often start
    alike) is asked once."""
    wanted = [
        [tuple(ids[: k + 1]) for k in range(start, len(ids))] for ids, start in zip(prompts, starts)
    ]
    return wanted, list(dict.fromkeys(p for candidate in wanted for p in candidate))


def cached_cost(unique: list[tuple[int, ...]], block: int) -> int:
    """Prompt tokens a cached route computes for the distinct positions ``unique``
    (:func:`asked_positions`): each one's prefix from its last whole cached block on (vLLM
    computes at least a prompt's last token; the context's blocks are cached by the draft
    that read it); the whole prefix where ``block`` is 0 (no prefix caching)."""
    lengths = [len(p) - 1 for p in unique]
    return sum(n - block * ((n - 1) // block) if block else n for n in lengths)


def rereading_cost(prompts: list[list[int]]) -> int:
    """Prompt tokens a re-reading route computes: every prompt whole."""
    return sum(len(ids) for ids in prompts)


CACHE_CONFIG = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)


def cache_block(metrics: str | None) -> int | None:
    """The prefix cache's block size from a vLLM server's ``/metrics``
    (``vllm:cache_config_info``): 0 where prefix caching is off, None where not given."""
    found = CACHE_CONFIG.search(metrics or "")
    if found is None:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
    if labels.get("enable_prefix_caching") == "False":
        return 0
    block = labels.get("block_size", "")
    return int(block) if block.isdigit() else None


def _close(found: list[float], truth: list[float]) -> bool:
    return len(found) == len(truth) and all(
        abs(a - b) <= ROUTE_TOLERANCE for a, b in zip(found, truth)
    )


def _asks(positions: list[tuple[list[int], int]]) -> list[list[tuple[list[int], int]]]:
    """The positions in order, cut into requests of at most :data:`MAX_LOGPROB_TOKEN_IDS`
    distinct tokens each."""
    asks: list[list[tuple[list[int], int]]] = []
    tokens: set[int] = set()
    for position in positions:
        if not asks or (position[1] not in tokens and len(tokens) == MAX_LOGPROB_TOKEN_IDS):
            asks.append([])
            tokens = set()
        asks[-1].append(position)
        tokens.add(position[1])
    return asks


class VLLMSession:
    """One request's context on a vLLM member: token ids."""

    def __init__(
        self, backend: VLLMBackend, client: Caller, ids: list[int], prompt_text: str | None
    ) -> None:
        self.backend = backend
        self.client = client
        """The backend's client as this answer's (its session header)."""
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
            return await self.backend.tokenize(self.client, self.prompt_text + answer)
        if not answer:
            return list(self.prompt_ids)
        return self.prompt_ids + await self.backend.tokenize(self.client, answer)

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
        response = await backend.complete(self.client, self.ids, **body)
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
        found = await self.backend.token_logprobs(self.client, prompts, starts)
        return [Score.of(mine) for mine in found]

    async def accept(self, segment: Segment) -> int:
        before = len(self.ids)
        self.answer += segment.text
        self.ids = await self._read(self.answer)
        return len(self.ids) - before

    async def aclose(self) -> None:
        """Nothing to release: the connection pool belongs to the backend."""
