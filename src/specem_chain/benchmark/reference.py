"""A faithful re-implementation of the reference code's design, for speed comparisons.

Every round it re-tokenises the whole context, drafts with ``generate`` from the full
context, and verifies with one in-line forward pass over the full context plus all
candidates, with no cache kept between calls. The selection logic is the engine's own, so a
comparison measures only the design of drafting and verifying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import torch

from ..backends.transformers import TransformersBackend, inline_mask
from ..engine.types import Draft, Fits, Message, Sampling, Score, Scoring, Segment


class ReferenceSession:
    """A member as the reference code runs it: the context is re-read at every step."""

    def __init__(self, backend: TransformersBackend, messages: Sequence[Message]) -> None:
        self.backend = backend
        self.prompt = backend.encode(backend.template.render(messages))
        self.prompt_tokens = len(self.prompt)
        self.answer = ""

    def context(self) -> list[int]:
        tokenizer = self.backend.tokenizer
        return self.prompt + tokenizer.encode(self.answer, add_special_tokens=False)

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        return await asyncio.to_thread(self._draft, window, sampling, seed)

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        return await asyncio.to_thread(self._score, candidates)

    async def accept(self, segment: Segment) -> int:
        self.answer += segment.text
        return len(self.backend.tokenizer.encode(segment.text, add_special_tokens=False))

    async def aclose(self) -> None:
        self.answer = ""

    @torch.inference_mode()
    def _draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        context = self.context()
        torch.manual_seed(seed)
        output = self.backend.model.generate(
            torch.tensor([context]),
            max_new_tokens=window,
            do_sample=sampling.temperature > 0,
            temperature=sampling.temperature or None,
            top_p=sampling.top_p,
            eos_token_id=sorted(self.backend.end_of_turn),
            pad_token_id=min(self.backend.end_of_turn),
        )[0, len(context) :].tolist()
        ends = [i for i, t in enumerate(output) if t in self.backend.end_of_turn]
        tokens = output[: ends[0]] if ends else output
        text = self.backend.tokenizer.decode(tokens, skip_special_tokens=True)
        return Draft(text=text, tokens=len(output), finished=bool(ends))

    @torch.inference_mode()
    def _score(self, candidates: Sequence[Segment]) -> list[Score]:
        tokenizer, eot = self.backend.tokenizer, self.backend.turn_end
        context = self.context()
        sequences = [
            tokenizer.encode(c.text, add_special_tokens=False) + ([eot] if c.finished else [])
            for c in candidates
        ]
        n = len(context)
        ids = context + [t for s in sequences for t in s]
        positions = list(range(n)) + [n + i for s in sequences for i in range(len(s))]
        mask = torch.full((len(ids), len(ids)), torch.finfo(torch.float32).min)
        mask[:n, :n] = torch.triu(mask[:n, :n], diagonal=1)
        mask[n:, :] = inline_mask([len(s) for s in sequences], n, torch.float32, mask.device)[0, 0]
        logits = (
            self.backend.model(
                input_ids=torch.tensor([ids]),
                attention_mask=mask[None, None].to(self.backend.model.dtype),
                position_ids=torch.tensor([positions]),
            )
            .logits[0]
            .float()
        )
        scores, offset = [], n
        for seq in sequences:
            predictors = torch.cat([logits[n - 1 : n], logits[offset : offset + len(seq) - 1]])
            logprobs = torch.log_softmax(predictors, dim=-1)
            scores.append(Score.of(logprobs.gather(1, torch.tensor(seq)[:, None])[:, 0].tolist()))
            offset += len(seq)
        return scores
