"""Members served by Text Generation Inference (TGI).

TGI takes text, so a session keeps the member's context as text: the conversation rendered
by the server's own chat template (``/chat_tokenize``) plus the accepted segments.

- Drafting is ``POST /generate`` with ``details``; ``finish_reason`` tells whether the
  member ended its turn.
- Scoring is ``POST /generate`` over context + candidate with ``decoder_input_details`` and
  one new token: the prefill log-probs of the candidate's tokens give its mean log-prob.
  The candidate's tokens are those after the longest common prefix of the prefill ids and
  the context's own ids (``/tokenize``), so a token that merges across the junction counts
  as the candidate's. TGI computes prefill log-probs without its prefix cache ("If users
  wants the prefill logprobs, we cannot reuse the cache", its ``queue.rs``), so every
  candidate costs a prefill of the whole context; the member says so once, at its first
  check.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..engine.types import Draft, Fits, Message, Sampling, Score, Scoring, Segment, Tool
from ..errors import MemberServerError
from ..members import Member
from .drafting import check_prompt, common_prefix, finish_draft
from .http import Caller, RemoteClient, score_each
from .template import PROBE_CONVERSATION, end_of_turn_text, fold_system, tools_as_text

FINISHED = ("eos_token", "stop_sequence")
NO_PREFILL_LOGPROBS = (
    "the TGI server returns no prefill log-probs, which scoring needs; start TGI v3 with "
    "--enable-prefill-logprobs"
)
REREADS = (
    "member %r: TGI scores each candidate by prefilling the whole context again (its "
    "prefill log-probs skip the prefix cache), so every round costs this member a prefill "
    "of the context per candidate; for long prompts serve the model with vLLM"
)

log = logging.getLogger(__name__)


class TGIBackend:
    """One TGI server: its connection pool and what its health check learnt."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.client = RemoteClient(member, member.source)
        self.model_id = ""
        self.max_input_tokens = 0
        self.max_total_tokens = 0
        self.bos_text = ""
        """The special token /generate adds in front of every input, if any."""
        self.end_of_turn = ""
        """The text of the token that ends the member's turn in its chat template."""
        self._checked = False

    @property
    def context_tokens(self) -> int | None:
        return self.max_total_tokens or None

    async def ready(self) -> None:
        """Check once that the URL is a TGI server that returns prefill log-probs.
        Requests that start together may both check; that is harmless."""
        if not self._checked:
            await self._check()
            if not self._checked:  # of requests that checked together, one says so
                log.warning(REREADS, self.member.label)
            self._checked = True

    async def _check(self) -> None:
        not_tgi = f"member {self.member.label!r}: {self.member.source} is not a TGI server"
        try:
            info = await self.client.get("/info")
        except MemberServerError as error:
            raise MemberServerError(f"{not_tgi} ({error})") from None
        if not isinstance(info, dict) or "max_input_tokens" not in info:
            raise MemberServerError(f"{not_tgi} (GET /info has no max_input_tokens)")
        self.model_id = str(info.get("model_id", ""))
        self.max_input_tokens = int(info["max_input_tokens"])
        self.max_total_tokens = int(info.get("max_total_tokens") or 2**31)
        empty = await self.tokenize(self.client, "")
        self.bos_text = empty[0]["text"] if empty else ""
        probe = await self.client.post("/chat_tokenize", {"messages": PROBE_CONVERSATION})
        self.end_of_turn = end_of_turn_text(probe["templated_text"])
        prefill = await self.prefill(self.client, "Hello world, hello")
        if any(t["logprob"] is None for t in prefill[1:]):
            raise MemberServerError(f"member {self.member.label!r}: {NO_PREFILL_LOGPROBS}")

    async def tokenize(self, client: Caller, text: str) -> list[dict[str, Any]]:
        return await client.post("/tokenize", {"inputs": text})

    async def prefill(self, client: Caller, text: str) -> list[dict[str, Any]]:
        """The prefill tokens of ``text`` (ids and log-probs, as /generate adds them)."""
        body = {
            "inputs": text,
            "parameters": {"max_new_tokens": 1, "details": True, "decoder_input_details": True},
        }
        response = await client.post("/generate", body)
        return response["details"]["prefill"]

    async def render(
        self, client: Caller, messages: Sequence[Message], tools: Sequence[Tool] = ()
    ) -> str:
        """The conversation in the server's chat template, without the BOS that /generate
        adds itself.

        Tools and tool turns are sent as text (:func:`tools_as_text`): TGI's message schema
        has no tool-call ids, and with ``tools`` TGI writes its own tool prompt for its
        grammar-constrained tool calling rather than the model's template.
        """
        messages = tools_as_text(messages, tools)
        try:
            templated = await client.post("/chat_tokenize", {"messages": list(messages)})
        except MemberServerError:
            if not messages or messages[0]["role"] != "system":
                raise
            folded = fold_system(messages)
            templated = await client.post("/chat_tokenize", {"messages": folded})
        text: str = templated["templated_text"]
        return text.removeprefix(self.bos_text) if self.bos_text else text

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        await self.ready()
        rendered = await self.render(self.client, messages, tools)
        return len(await self.tokenize(self.client, rendered))

    async def count_text(self, text: str) -> int:
        await self.ready()
        return len(await self.tokenize(self.client, text)) - bool(self.bos_text)

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> TGISession:
        await self.ready()
        client = self.client.answering(answer)
        context = await self.render(client, messages, tools)
        ids = [t["id"] for t in await self.tokenize(client, context)]
        holder = f"whose server accepts {self.max_input_tokens}"
        check_prompt(self.member.label, len(ids), self.max_input_tokens, holder)
        return TGISession(self, client, context, ids)

    async def aclose(self) -> None:
        await self.client.aclose()


class TGISession:
    """One request's context on a TGI member."""

    runs_on = "tgi"

    def __init__(self, backend: TGIBackend, client: Caller, context: str, ids: list[int]) -> None:
        self.backend = backend
        self.client = client
        """The backend's client as this answer's (its session header)."""
        self.context = context
        self.ids = ids
        self.prompt_tokens = len(ids)

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        backend = self.backend
        room = backend.max_total_tokens - len(self.ids)
        parameters: dict[str, Any] = {
            "max_new_tokens": max(1, min(window, room)),
            "details": True,
            "do_sample": sampling.temperature > 0,
            "seed": seed % (2**63 - 1) + 1,  # TGI wants a positive seed
        }
        if sampling.temperature > 0:
            parameters["temperature"] = sampling.temperature
            if sampling.top_p < 1.0:  # TGI accepts top_p in (0, 1) only
                parameters["top_p"] = sampling.top_p
        if sampling.repeat_penalty != 1.0:  # TGI's covers the whole context, not the latest
            parameters["repetition_penalty"] = sampling.repeat_penalty
        if backend.end_of_turn:
            parameters["stop"] = [backend.end_of_turn]
        response = await self.client.post(
            "/generate", {"inputs": self.context, "parameters": parameters}
        )
        details = response["details"]
        return finish_draft(
            response["generated_text"],
            int(details["generated_tokens"]),
            details["finish_reason"] in FINISHED,
            (backend.end_of_turn,),
        )

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        return await score_each(self.backend.member, candidates, scoring, self._score)

    async def _score(self, candidate: Segment) -> Score:
        """The candidate's tokens are those of the prefill after its common start with the
        context's own tokens, so a token merged across the join is the candidate's."""
        ending = self.backend.end_of_turn if candidate.finished else ""
        prefill = await self.backend.prefill(self.client, self.context + candidate.text + ending)
        start = common_prefix([t["id"] for t in prefill], self.ids)
        logprobs = [t["logprob"] for t in prefill[max(start, 1) :]]
        if not logprobs:
            raise ValueError("cannot score an empty candidate that does not end the turn")
        if any(p is None for p in logprobs):
            raise MemberServerError(f"member {self.backend.member.label!r}: {NO_PREFILL_LOGPROBS}")
        return Score.of(logprobs)

    async def accept(self, segment: Segment) -> int:
        before = len(self.ids)
        self.context += segment.text
        self.ids = [t["id"] for t in await self.backend.tokenize(self.client, self.context)]
        return len(self.ids) - before

    async def aclose(self) -> None:
        """Nothing to release: the connection pool belongs to the backend."""
