"""Members that run in this process with Hugging Face transformers.

A :class:`TransformersBackend` holds what is heavy and shared: the loaded weights and the
tokenizer. A :class:`TransformersSession` holds one request's state: the member's token
context and its KV cache. Drafting continues from the cache; verification scores all
candidates in one forward pass over the cached prefix ("in-line"); both crop the cache back
to the prefix afterwards, so no token is ever read twice.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.generation import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from .. import defaults
from ..errors import MemberSpecError, PromptTooLongError
from ..members import Member, Sampling
from .base import MAX_CHARACTER_TOKENS, Draft, Scoring, Segment, finish_draft
from .chat import (
    PLAIN_STOP,
    Message,
    Tool,
    plain_transcript,
    render_chat,
    renders_tools,
    tools_as_text,
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelLocation:
    """Where to load a member's weights from."""

    path: str
    gguf_file: str | None = None


def locate(source: str) -> ModelLocation:
    """Resolve a member source: a built-in name, a folder, a GGUF file, or a hub model id."""
    if defaults.builtin(source) is not None:
        return ModelLocation(str(defaults.model_folder(source)))
    path = Path(source).expanduser()
    if path.is_dir():
        return ModelLocation(str(path))
    if path.is_file() and path.suffix == ".gguf":
        return ModelLocation(str(path.parent), path.name)
    if path.exists():
        raise MemberSpecError(f"{source!r} is a file but not a .gguf model file")
    looks_like_path = source.startswith(("/", ".", "~")) or source.endswith(".gguf")
    if looks_like_path:
        raise MemberSpecError(f"member path {source!r} does not exist")
    parts = source.split("/")
    if len(parts) == 2 and all(parts):
        return ModelLocation(source)  # a hub model id; loading tells if it is reachable
    known = ", ".join(defaults.BUILTINS)
    raise MemberSpecError(
        f"unknown member {source!r}: give a built-in name ({known}), a model folder, "
        "a .gguf file, or a hub model id such as 'org/model'"
    )


def end_of_turn_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Token ids that end the member's turn, from its generation config and tokenizer."""
    ids: set[int] = set()
    for value in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(value)
    return frozenset(ids)


class TransformersBackend:
    """A loaded causal LM and its tokenizer, shared by every request of one member."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.device = model.device
        self.end_of_turn = end_of_turn_ids(model, tokenizer)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 2**31)
        self.native_tools = bool(tokenizer.chat_template) and renders_tools(self._apply_template)

    @classmethod
    def load(cls, member: Member) -> TransformersBackend:
        """Load the member's model, or return the copy this process already loaded."""
        key = (member.source, member.device, member.dtype)
        with _loading:
            if key not in _loaded:
                _loaded[key] = cls._load(member)
            backend = _loaded[key]
        return backend

    @classmethod
    def _load(cls, member: Member) -> TransformersBackend:
        where = locate(member.source)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        kwargs: dict[str, Any] = {"gguf_file": where.gguf_file} if where.gguf_file else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(where.path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(
                where.path,
                dtype=_DTYPES[member.dtype],
                attn_implementation="sdpa",
                **kwargs,
            )
        except OSError as error:
            raise MemberSpecError(f"cannot load member {member.source!r}: {error}") from error
        return cls(model.to(member.device), tokenizer, name=member.label)

    def render(
        self, messages: Sequence[Message], tools: Sequence[Tool] = ()
    ) -> tuple[list[int], tuple[str, ...]]:
        """Token ids of the conversation, ready for the answer, and the member's stop texts.

        The member's own chat template renders the conversation (:func:`render_chat`: tools
        as text when the template has no tool support, the system text folded into the first
        user turn when it rejects a system turn). A model without a template gets the plain
        transcript of :func:`plain_transcript`.
        """
        if not self.tokenizer.chat_template:
            text = plain_transcript(tools_as_text(messages, tools))
            return self.tokenizer.encode(text, add_special_tokens=True), PLAIN_STOP
        text = render_chat(self._apply_template, messages, tools, native_tools=self.native_tools)
        return self.tokenizer.encode(text, add_special_tokens=False), ()

    def _apply_template(self, messages: Sequence[Message], tools: Sequence[Tool] | None) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tools=tools, add_generation_prompt=True, tokenize=False
        )

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = ()
    ) -> TransformersSession:
        """Start a request: render the conversation and read it into a fresh KV cache."""
        ids, stop_texts = self.render(messages, tools)
        if len(ids) >= self.max_context:
            raise PromptTooLongError(
                f"the prompt is {len(ids)} tokens for member {self.name!r}, whose context "
                f"holds {self.max_context}; shorten the conversation"
            )
        session = TransformersSession(self, ids, stop_texts)
        await asyncio.to_thread(session.prefill)
        return session


@dataclass(frozen=True)
class Verified:
    """A candidate's cache entries (per layer) and the logits that follow it."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    next_logits: torch.Tensor


_loading = threading.Lock()
_loaded: dict[tuple[str, str, str], TransformersBackend] = {}


class TransformersSession:
    """One request's state for one in-process member."""

    def __init__(
        self, backend: TransformersBackend, prompt: list[int], stop_texts: tuple[str, ...]
    ) -> None:
        self.backend = backend
        self.ids = list(prompt)
        self.stop_texts = stop_texts
        self.prompt_tokens = len(prompt)
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
            cache=self.cache,
            use_cache=True,
        )
        return out.logits[0].float()

    def _rollback(self, prefix: int) -> None:
        """Drop every cached token after the first ``prefix``."""
        extra = self.cache.get_seq_length() - prefix
        if extra:
            self.cache.crop(-extra)

    def prefill(self) -> None:
        self.next_logits = self._forward(self.ids)[-1]

    # -- the three steps the engine calls ----------------------------------------------

    async def draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        return await asyncio.to_thread(self._draft, window, sampling, seed)

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[float]:
        return await asyncio.to_thread(self._score, candidates, scoring)

    async def accept(self, segment: Segment) -> int:
        return await asyncio.to_thread(self._accept, segment)

    async def aclose(self) -> None:
        self.cache = DynamicCache()
        self.next_logits = None
        self.verified = {}

    # -- implementations ---------------------------------------------------------------

    @torch.inference_mode()
    def _draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        assert self.next_logits is not None
        generator = torch.Generator(self.backend.device).manual_seed(seed)
        warpers = LogitsProcessorList()
        if sampling.temperature > 0:
            warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1.0:
                warpers.append(TopPLogitsWarper(sampling.top_p))
        prefix = self.cache.get_seq_length()
        logits, tokens, finished = self.next_logits, [], False
        # Past the window, draft only to complete a character whose bytes it cut apart.
        limit = min(window + MAX_CHARACTER_TOKENS, self.backend.max_context - len(self.ids))
        try:
            while len(tokens) < limit:
                token = _sample(logits, warpers, sampling.temperature, generator, tokens)
                if token in self.backend.end_of_turn:
                    finished = True
                    break
                tokens.append(token)
                if len(tokens) >= limit or (
                    len(tokens) >= window and not self._decode(tokens).endswith("\ufffd")
                ):
                    break
                logits = self._forward([token])[-1]
        finally:
            self._rollback(prefix)
        return finish_draft(self._decode(tokens), len(tokens), finished, self.stop_texts)

    def _decode(self, tokens: list[int]) -> str:
        """Decode drafted tokens as they read after the context (keeps a leading space)."""
        anchor = self.ids[-1:]
        head = self.backend.tokenizer.decode(anchor, skip_special_tokens=True)
        whole = self.backend.tokenizer.decode(anchor + tokens, skip_special_tokens=True)
        return whole[len(head) :]

    def _encode(self, segment: Segment) -> list[int]:
        ids = self.backend.tokenizer.encode(segment.text, add_special_tokens=False)
        if segment.finished:
            ids.append(min(self.backend.end_of_turn))
        return ids

    @torch.inference_mode()
    def _score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[float]:
        assert self.next_logits is not None
        sequences = [self._encode(c) for c in candidates]
        if any(not s for s in sequences):
            raise ValueError("cannot score an empty candidate that does not end the turn")
        prefix = self.cache.get_seq_length()
        device = self.backend.device
        ids = [t for s in sequences for t in s]
        positions = torch.cat(
            [torch.arange(prefix, prefix + len(s), device=device) for s in sequences]
        )
        mask = inline_mask([len(s) for s in sequences], prefix, self.backend.model.dtype, device)
        try:
            logits = self._forward(ids, mask=mask, positions=positions)
            self._keep_verified(candidates, sequences, prefix, logits)
        finally:
            self._rollback(prefix)
        scores, offset = [], 0
        for seq in sequences:
            # The first token is predicted by the context; the rest by the candidate itself.
            predictors = torch.cat([self.next_logits[None], logits[offset : offset + len(seq) - 1]])
            if scoring == "mean_logprob":
                predictors = torch.log_softmax(predictors, dim=-1)
            target = torch.tensor(seq, device=device)
            scores.append(predictors.gather(1, target[:, None]).mean().item())
            offset += len(seq)
        return scores

    def _keep_verified(
        self,
        candidates: Sequence[Segment],
        sequences: list[list[int]],
        prefix: int,
        logits: torch.Tensor,
    ) -> None:
        """Keep each candidate's cache entries from the verification pass.

        Position ids restart at the prefix for every candidate and each candidate attends
        only to the prefix and itself, so its entries are exactly those that reading it after
        the prefix would make: accepting the winner then needs no forward pass.
        """
        self.verified, offset = {}, 0
        for candidate, seq in zip(candidates, sequences):
            span = slice(prefix + offset, prefix + offset + len(seq))
            if not candidate.finished:  # a finished candidate ends the answer; never accepted
                self.verified[tuple(seq)] = Verified(
                    keys=[layer.keys[..., span, :] for layer in self.cache.layers],
                    values=[layer.values[..., span, :] for layer in self.cache.layers],
                    next_logits=logits[offset + len(seq) - 1],
                )
            offset += len(seq)

    @torch.inference_mode()
    def _accept(self, segment: Segment) -> int:
        ids = self._encode(segment)
        verified, self.verified = self.verified.get(tuple(ids)), {}
        if verified is not None:
            for layer, keys, values in zip(self.cache.layers, verified.keys, verified.values):
                layer.keys = torch.cat([layer.keys, keys], dim=-2)
                layer.values = torch.cat([layer.values, values], dim=-2)
            self.next_logits = verified.next_logits
        elif ids:
            self.next_logits = self._forward(ids)[-1]
        self.ids.extend(ids)
        return len(ids)


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


def _sample(
    logits: torch.Tensor,
    warpers: LogitsProcessorList,
    temperature: float,
    generator: torch.Generator,
    tokens: list[int],
) -> int:
    if temperature == 0:
        return int(logits.argmax())
    history = torch.tensor([tokens], dtype=torch.long, device=logits.device)
    warped = warpers(history, logits[None])
    probs = torch.softmax(warped, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
