"""In-line verification must score exactly like scoring each candidate on its own."""

from __future__ import annotations

import inspect

import pytest
import torch
from reference_scoring import QUESTION, separate_scores

from specem_chain.backends.transformers import TransformersBackend, cache_keyword, inline_mask
from specem_chain.engine.types import Segment
from specem_chain.members import Member, Sampling


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize("scoring", ["mean_logprob", "mean_logit"])
async def test_inline_scores_equal_separate_scores(tiny_models, architecture, scoring):
    backend = TransformersBackend.load(Member.local(str(tiny_models[architecture])))
    session = await backend.open(QUESTION)
    await session.accept(Segment(" Natalia sold"))  # a context that grew after the prompt
    prefix = session.cache.get_seq_length()
    candidates = [
        Segment(" 48 clips in April and half as many in May"),
        Segment(" clips"),  # a single token
        Segment(" The quick brown fox"),
        Segment(" 72", finished=True),  # scored with the end-of-turn token
        Segment("", finished=True),  # only the end-of-turn token
    ]
    spans = [session._candidate(c) for c in candidates]
    assert all(start == len(session.ids) for start, _ in spans)
    encoded = [seq for _, seq in spans]
    assert len(encoded[1]) == 1 and len(encoded[4]) == 1
    assert len({len(e) for e in encoded}) > 2  # unequal lengths

    inline = [s.mean for s in await session.score(candidates, scoring)]
    assert [s.tokens for s in await session.score(candidates, scoring)] == [len(e) for e in encoded]
    separate = separate_scores(backend, session.ids, encoded, scoring)

    assert max(abs(a - b) for a, b in zip(inline, separate)) <= 1e-4
    assert session.cache.get_seq_length() == prefix  # cropped back to the prefix


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
async def test_a_candidate_that_merges_with_the_context_scores_as_one_text(
    tiny_models, architecture
):
    """A candidate that continues the context's last word is read as the tokenizer reads
    context and candidate together: its tokens start inside the context's last ones."""
    backend = TransformersBackend.load(Member.local(str(tiny_models[architecture])))
    session = await backend.open(QUESTION)
    await session.accept(Segment(" Nat"))
    before = list(session.ids)
    candidates = [Segment("alia sold clips"), Segment(" clips")]
    (start, merged), (after, plain) = [session._candidate(c) for c in candidates]
    assert start < len(before) == after
    assert before[:start] + merged == backend.encode(session.text + candidates[0].text)

    scores = await session.score(candidates, "mean_logprob")
    expected = separate_scores(backend, before[:start], [merged], "mean_logprob")
    expected += separate_scores(backend, before, [plain], "mean_logprob")
    assert [s.tokens for s in scores] == [len(merged), len(plain)]
    assert max(abs(s.mean - e) for s, e in zip(scores, expected)) <= 1e-4
    # the context and its cache are as they were
    assert session.ids == before and session.cache.get_seq_length() == len(before)
    with torch.inference_mode():
        fresh = backend.model(input_ids=torch.tensor([before])).logits[0, -1].float()
    assert torch.allclose(session.next_logits, fresh, atol=1e-4)

    await session.accept(candidates[0])
    assert session.ids == backend.encode(session.text)
    assert session.cache.get_seq_length() == len(session.ids)


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
async def test_cache_reuse_matches_a_fresh_read(tiny_models, architecture):
    """After drafting, verifying and accepting, the cached state equals a fresh read."""
    backend = TransformersBackend.load(Member.local(str(tiny_models[architecture])))
    session = await backend.open(QUESTION)
    for seed in range(3):
        draft = await session.draft(6, Sampling(), seed)
        await session.score([Segment(draft.text or " x"), Segment(" 5")], "mean_logprob")
        await session.accept(Segment(draft.text or " x"))
    assert session.cache.get_seq_length() == len(session.ids)
    with torch.inference_mode():
        fresh = backend.model(input_ids=torch.tensor([session.ids])).logits[0, -1].float()
    assert torch.allclose(session.next_logits, fresh, atol=1e-4)


async def test_accepting_a_verified_candidate_reuses_its_cache_entries(tiny_models):
    backend = TransformersBackend.load(Member.local(str(tiny_models["llama"])))
    session = await backend.open(QUESTION)
    await session.score([Segment(" 48 clips"), Segment(" The quick brown fox")], "mean_logprob")

    def no_forward(*args, **kwargs):
        raise AssertionError("accepting a verified candidate must not run the model")

    session._forward = no_forward
    await session.accept(Segment(" The quick brown fox"))
    del session._forward
    with torch.inference_mode():
        fresh = backend.model(input_ids=torch.tensor([session.ids])).logits[0, -1].float()
    assert torch.allclose(session.next_logits, fresh, atol=1e-4)
    # the cache now equals a fresh read: the next step's logits agree too
    await session.accept(Segment(" jumps"))
    with torch.inference_mode():
        fresh = backend.model(input_ids=torch.tensor([session.ids])).logits[0, -1].float()
    assert torch.allclose(session.next_logits, fresh, atol=1e-4)


def test_inline_mask_lets_each_candidate_see_only_prefix_and_itself():
    mask = inline_mask([2, 1], prefix=3, dtype=torch.float32, device=torch.device("cpu"))
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 0, 0, 1],
    ]


async def test_drafting_is_reproducible_with_a_seed(tiny_models):
    backend = TransformersBackend.load(Member.local(str(tiny_models["qwen2"])))
    first = await (await backend.open(QUESTION)).draft(8, Sampling(), 123)
    again = await (await backend.open(QUESTION)).draft(8, Sampling(), 123)
    assert first == again


def test_the_cache_is_passed_by_the_keyword_the_model_takes(tiny_models):
    """transformers 5.24 renamed the forward's ``past_key_values`` to ``cache``; under the
    other name the cache is ignored and stays empty (the GPU image has 5.17)."""
    backend = TransformersBackend.load(Member.local(str(tiny_models["llama"])))
    assert backend.cache_keyword in inspect.signature(backend.model.forward).parameters

    def forward_before_5_24(input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        """The signature of a causal LM's forward in transformers 5.0 to 5.23."""

    assert cache_keyword(type("Older", (), {"forward": forward_before_5_24})) == "past_key_values"
