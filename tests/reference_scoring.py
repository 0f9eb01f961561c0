"""Scoring each candidate on its own, with no cache: what in-line verification must equal."""

from __future__ import annotations

import torch

from specem_chain.backends.transformers import TransformersBackend

QUESTION = [{"role": "user", "content": "How many clips did Natalia sell altogether?"}]


def separate_scores(
    backend: TransformersBackend, context: list[int], candidates: list[list[int]], scoring: str
) -> list[float]:
    """Score each candidate with a fresh forward pass over context + candidate, no cache."""
    scores = []
    for candidate in candidates:
        ids = torch.tensor([context + candidate], device=backend.device)
        with torch.inference_mode():
            logits = backend.model(input_ids=ids).logits[0].float()
        predictors = logits[len(context) - 1 : len(context) - 1 + len(candidate)]
        if scoring == "mean_logprob":
            predictors = torch.log_softmax(predictors, dim=-1)
        target = torch.tensor(candidate, device=predictors.device)[:, None]
        scores.append(predictors.gather(1, target).mean().item())
    return scores
