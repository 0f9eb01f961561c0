"""Members that run in this process with Hugging Face transformers.

A :class:`TransformersBackend` holds what is heavy and shared: the loaded weights and the
tokenizer. A :class:`TransformersSession` holds one request's state: the member's token
context and its KV cache. Drafting continues from the cache; verification scores all
candidates in one forward pass over the cached prefix ("in-line"); both crop the cache back
to the prefix afterwards, so no token is ever read twice.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.generation import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from ..engine.types import (
    REPEAT_LAST_N,
    Draft,
    Fits,
    Message,
    Sampling,
    Score,
    Scoring,
    Segment,
    Tool,
)
from ..errors import MemberSpecError
from ..members import Member, model_files
from .drafting import Sampler, check_prompt, draft_tokens
from .local import LocalSession
from .template import ChatTemplate, tokenizer_template

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def end_of_turn_ids(
    model: Any, tokenizer: Any, template: ChatTemplate
) -> tuple[frozenset[int], int]:
    """Token ids that end the member's turn (its generation config's and tokenizer's end of
    sequence, and the marker its chat template ends a turn with), and the one a finished
    candidate is scored with: the template's marker where it is one token."""
    ids: set[int] = set()
    for value in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(value)
    marker = tokenizer.encode(template.end_of_turn, add_special_tokens=False)
    if template.end_of_turn and len(marker) == 1:
        ids.add(marker[0])
        return frozenset(ids), marker[0]
    if not ids:
        raise MemberSpecError("the model names no end-of-turn token")
    return frozenset(ids), min(ids)


def cache_keyword(model: Any) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` from transformers
    5.24 on, ``past_key_values`` before. Under the other name the cache would reach the
    attention layers as an unknown keyword, be ignored there, and silently stay empty."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class TransformersBackend:
    """A loaded causal LM and its tokenizer, shared by every request of one member."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.device = model.device
        self.template = tokenizer_template(tokenizer)
        self.end_of_turn, self.turn_end = end_of_turn_ids(model, tokenizer, self.template)
        self.context_tokens = int(getattr(model.config, "max_position_embeddings", 0) or 2**31)
        self.cache_keyword = cache_keyword(model)

    @classmethod
    def load(cls, member: Member) -> TransformersBackend:
        """Load the member's model: a model folder, a GGUF file or a hub model id."""
        files = model_files(member.source)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        kwargs: dict[str, Any] = {"gguf_file": files.gguf_file} if files.gguf_file else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(files.path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(
                files.path, dtype=_DTYPES[member.dtype], attn_implementation="sdpa", **kwargs
            )
        except OSError as error:
            raise MemberSpecError(f"cannot load member {member.source!r}: {error}") from error
        return cls(model.to(member.device), tokenizer, name=member.label)

    def encode(self, text: str) -> list[int]:
        """Token ids of a context: the rendered conversation and the answer, as one text.
        A plain transcript starts with the tokenizer's own special tokens (its BOS)."""
        return self.tokenizer.encode(text, add_special_tokens=self.template.plain)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        return len(self.encode(self.template.render(messages, tools)))

    async def count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> TransformersSession:
        """Start a request: render the conversation and read it into a fresh KV cache."""
        session = TransformersSession(self, self.template.render(messages, tools))
        holds = f"whose context holds {self.context_tokens}"
        check_prompt(self.name, session.prompt_tokens, self.context_tokens - 1, holds)
        await asyncio.to_thread(session.prefill)
        return session


@dataclass(frozen=True)
class Verified:
    """A candidate's cache entries (per layer) and the logits that follow it."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    next_logits: torch.Tensor


class TransformersSession(LocalSession):
    """One request's state for one in-process member: its context and KV cache."""

    backend: TransformersBackend
    runs_on = "transformers"

    def __init__(self, backend: TransformersBackend, prompt: str) -> None:
        super().__init__(backend, prompt)
        self.cache = DynamicCache()
        self.next_logits: torch.Tensor | None = None
        """Logits that predict the token after the context."""
        self.verified: dict[tuple[int, ...], Verified] = {}
        """This round's verified candidates, by token ids, ready to be accepted."""

    # -- forward passes -------------------------------------------------------------

    @torch.inference_mode()
    def _forward(
        self,
        ids: Sequence[int],
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``ids`` on top of the cache; return their logits (float32, [n, vocab])."""
        start = self.cache.get_seq_length()
        device = self.backend.device
        if positions is None:
            positions = torch.arange(start, start + len(ids), device=device)
        out = self.backend.model(
            input_ids=torch.tensor([list(ids)], device=device),
            attention_mask=mask,
            position_ids=positions.unsqueeze(0),
            use_cache=True,
            **{self.backend.cache_keyword: self.cache},
        )
        return out.logits[0].float()

    def _rollback(self, prefix: int) -> None:
        """Drop every cached token after the first ``prefix``."""
        extra = self.cache.get_seq_length() - prefix
        if extra:
            self.cache.crop(-extra)

    def _read_from(self, start: int) -> None:
        """Bring the cache to the context, reading it again from ``start`` (at least its
        last token, for the logits that follow it)."""
        start = min(start, len(self.ids) - 1)
        self._rollback(start)
        self.next_logits = self._forward(self.ids[start:])[-1]

    def prefill(self) -> None:
        self._read_from(0)

    # -- the three steps the engine calls ----------------------------------------------

    async def aclose(self) -> None:
        self.cache = DynamicCache()
        self.next_logits = None
        self.verified = {}

    # -- implementations ---------------------------------------------------------------

    @torch.inference_mode()
    def _draft(
        self, window: int, sampling: Sampling, seed: int, run_on: bool, fits: Fits | None
    ) -> Draft:
        assert self.next_logits is not None
        prefix = self.cache.get_seq_length()
        try:
            tokens, finished, at_boundary = draft_tokens(
                self.next_logits,
                lambda tokens: self._forward(tokens[-1:])[-1],
                TokenSampler(sampling, seed, self.ids, self.backend.device),
                end_of_turn=self.backend.end_of_turn,
                decode=self._decode,
                window=window,
                room=self.backend.context_tokens - len(self.ids),
                run_on=run_on,
                fits=fits,
            )
        finally:
            self._rollback(prefix)
        return self._finish(tokens, finished, at_boundary)

    @torch.inference_mode()
    def _score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        assert self.next_logits is not None
        spans = [self._candidate(c) for c in candidates]
        after = [k for k, (start, _) in enumerate(spans) if start == len(self.ids)]
        scores = dict(zip(after, self._score_inline([spans[k][1] for k in after], scoring)))
        for k, (start, seq) in enumerate(spans):
            if k not in scores:
                scores[k] = self._score_apart(start, seq, scoring)
        return [scores[k] for k in range(len(spans))]

    def _score_inline(self, sequences: list[list[int]], scoring: Scoring) -> list[Score]:
        """Score candidates that start after the context in one pass over the cached
        prefix, keeping their cache entries for :meth:`_accept`."""
        if not sequences:
            return []
        assert self.next_logits is not None
        prefix = self.cache.get_seq_length()
        device = self.backend.device
        ids = [t for s in sequences for t in s]
        positions = torch.cat(
            [torch.arange(prefix, prefix + len(s), device=device) for s in sequences]
        )
        mask = inline_mask([len(s) for s in sequences], prefix, self.backend.model.dtype, device)
        try:
            logits = self._forward(ids, mask=mask, positions=positions)
            self._keep_verified(sequences, prefix, logits)
        finally:
            self._rollback(prefix)
        scores, offset = [], 0
        for seq in sequences:
            # The first token is predicted by the context; the rest by the candidate itself.
            predictors = torch.cat([self.next_logits[None], logits[offset : offset + len(seq) - 1]])
            scores.append(token_score(predictors, seq, scoring))
            offset += len(seq)
        return scores

    def _score_apart(self, start: int, seq: list[int], scoring: Scoring) -> Score:
        """Score a candidate whose first token merged with the context's last ones: read it
        after the context's first ``start`` tokens, then restore the context."""
        self._rollback(start - 1)
        try:
            logits = self._forward([self.ids[start - 1], *seq[:-1]])
        finally:
            self._read_from(start - 1)
        return token_score(logits, seq, scoring)

    def _keep_verified(self, sequences: list[list[int]], prefix: int, logits: torch.Tensor) -> None:
        """Keep each candidate's cache entries from the verification pass.

        Position ids restart at the prefix for every candidate and each candidate attends
        only to the prefix and itself, so its entries are exactly those that reading it after
        the prefix would make: accepting the winner then needs no forward pass. (A finished
        candidate ends the answer and is never accepted; keeping it is harmless.)
        """
        self.verified, offset = {}, 0
        for seq in sequences:
            span = slice(prefix + offset, prefix + offset + len(seq))
            self.verified[tuple(seq)] = Verified(
                keys=[layer.keys[..., span, :] for layer in self.cache.layers],
                values=[layer.values[..., span, :] for layer in self.cache.layers],
                next_logits=logits[offset + len(seq) - 1],
            )
            offset += len(seq)

    @torch.inference_mode()
    def _accept(self, segment: Segment) -> int:
        old = len(self.ids)
        start, grew = self._grow(segment)
        verified = self.verified.get(tuple(self.ids[start:])) if start == old else None
        self.verified = {}
        if verified is not None:
            for layer, keys, values in zip(self.cache.layers, verified.keys, verified.values):
                layer.keys = torch.cat([layer.keys, keys], dim=-2)
                layer.values = torch.cat([layer.values, values], dim=-2)
            self.next_logits = verified.next_logits
        else:
            self._read_from(start)
        return grew


def token_score(predictors: torch.Tensor, targets: Sequence[int], scoring: Scoring) -> Score:
    """The score of ``targets``, each token's log-probability (or raw logit) under
    ``predictors[i]``."""
    if scoring == "mean_logprob":
        predictors = torch.log_softmax(predictors, dim=-1)
    target = torch.tensor(list(targets), device=predictors.device)
    return Score.of(predictors.gather(1, target[:, None])[:, 0].tolist())


def inline_mask(
    lengths: Sequence[int], prefix: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Attention mask for verifying candidates in one pass: ``[1, 1, N, prefix + N]``.

    Every candidate token sees the whole prefix and the earlier tokens of its own candidate,
    never another candidate. Allowed entries are 0, blocked ones the dtype's minimum.
    """
    total = sum(lengths)
    allowed = torch.zeros(total, prefix + total, dtype=torch.bool, device=device)
    allowed[:, :prefix] = True
    offset = 0
    for n in lengths:
        block = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        allowed[offset : offset + n, prefix + offset : prefix + offset + n] = block
        offset += n
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


class TokenSampler(Sampler[torch.Tensor]):
    """Samples tokens from logits as a draft does: the repetition penalty over the latest
    tokens (``history`` and those sampled since), then temperature and top-p, seeded."""

    def __init__(
        self,
        sampling: Sampling,
        seed: int,
        history: Sequence[int] = (),
        device: torch.device | str = "cpu",
    ) -> None:
        self.greedy = sampling.temperature == 0
        self.generator = torch.Generator(device).manual_seed(seed)
        self.processors = LogitsProcessorList()
        if sampling.repeat_penalty != 1.0:
            self.processors.append(RepetitionPenaltyLogitsProcessor(sampling.repeat_penalty))
        if not self.greedy:
            self.processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1.0:
                self.processors.append(TopPLogitsWarper(sampling.top_p))
        self.history = list(history[-REPEAT_LAST_N:])

    def pick(self, logits: torch.Tensor, among: Sequence[int] | None = None) -> int:
        if among is not None:
            only = torch.full_like(logits, -torch.inf)
            only[list(among)] = logits[list(among)]
            logits = only
        latest = torch.tensor([self.history[-REPEAT_LAST_N:]], dtype=torch.long)
        processed = self.processors(latest.to(logits.device), logits[None])
        if self.greedy:
            return int(processed.argmax())
        probs = torch.softmax(processed, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def take(self, token: int) -> None:
        self.history.append(token)

    def likeliest(self, logits: torch.Tensor, most: int) -> list[int]:
        return torch.topk(logits, min(most, logits.shape[-1])).indices.tolist()
