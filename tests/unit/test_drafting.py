"""The token-drafting loop that every in-process backend shares, with a scripted vocabulary."""

from __future__ import annotations

import pytest
from scripted import ScriptedSession, events

from specem_chain.backends.drafting import MAX_CHARACTER_TOKENS, RUN_ON_TOKENS, draft_tokens
from specem_chain.engine.types import Draft

END = 0
PIECES = {1: " The", 2: " quick", 3: " br", 4: "own", 5: " fox", 6: ".\n", 7: "ie", 8: "s"}


def decode(tokens: list[int]) -> str:
    return "".join(PIECES[t] for t in tokens)


class ScriptSampler:
    """A 'model' that samples the script's tokens in turn and ranks the vocabulary by id;
    sampled among some tokens, it takes the first of them (as greedy decoding would)."""

    def __init__(self, script: list[int]) -> None:
        self.stream = iter(script)
        self.taken: list[int] = []

    def pick(self, logits: None, among: list[int] | None = None) -> int:
        return among[0] if among else next(self.stream)

    def take(self, token: int) -> None:
        self.taken.append(token)

    def likeliest(self, logits: None, most: int) -> list[int]:
        return [*sorted(PIECES)[:most], END]


def draft(script: list[int], window: int, *, run_on: bool = False, room: int = 100, fits=None):
    """Draft with a 'model' that samples the script's tokens in turn."""
    steps: list[int] = []

    def step(tokens: list[int]) -> None:
        steps.append(len(tokens))

    return (
        draft_tokens(
            None,
            step,
            ScriptSampler(script),
            end_of_turn=frozenset({END}),
            decode=decode,
            window=window,
            room=room,
            run_on=run_on,
            fits=fits,
        ),
        steps,
    )


def test_the_window_stops_a_draft_inside_a_word():
    (tokens, finished, at_boundary), steps = draft([1, 2, 3, 4, 5], window=3)
    assert (tokens, finished, at_boundary) == ([1, 2, 3], False, False)
    assert steps == [1, 2]  # the last token is never read: nothing needs its logits


def test_an_end_of_turn_token_finishes_a_draft():
    (tokens, finished, _), _ = draft([1, 2, END], window=5)
    assert (tokens, finished) == ([1, 2], True)


def test_a_draft_that_runs_on_ends_with_its_last_word():
    (tokens, finished, at_boundary), steps = draft([1, 2, 3, 4, 7, 8, 5], window=3, run_on=True)
    # " The quick br" -> "own" -> "ie" -> "s" end the word; " fox" starts the next: left out
    assert decode(tokens) == " The quick brownies"
    assert (finished, at_boundary) == (False, True)
    assert steps == [1, 2, 3, 4, 5, 6]


def test_a_draft_that_runs_on_stops_at_a_line_end_or_at_the_window_boundary():
    (tokens, _, at_boundary), _ = draft([1, 6, 2], window=2, run_on=True)
    assert (decode(tokens), at_boundary) == (" The.\n", True)
    (tokens, _, at_boundary), _ = draft([1, 2, 5], window=2, run_on=True)
    assert (decode(tokens), at_boundary) == (" The quick", True)


def test_a_word_too_long_to_finish_is_left_to_the_boundary_cleaner():
    (tokens, _, at_boundary), _ = draft([1, 3] + [4] * 20, window=2, run_on=True)
    assert len(tokens) == 2 + RUN_ON_TOKENS and not at_boundary


def test_a_draft_never_outgrows_the_room_left_in_the_context():
    (tokens, _, _), _ = draft([1, 3, 4, 4, 4], window=2, room=3, run_on=True)
    assert len(tokens) == 3
    assert MAX_CHARACTER_TOKENS < RUN_ON_TOKENS


def no_fox(text: str, finished: bool) -> bool:
    """A format without foxes, whose answer must not end before its second word."""
    return "fox" not in text and (not finished or len(text.split()) >= 2)


def test_a_token_that_breaks_the_format_is_drawn_again_among_those_that_fit():
    (tokens, finished, _), _ = draft([1, 5, 2, 3, 4], window=3, fits=no_fox)
    # " fox" breaks it: the likeliest fitting token (" The", by this model's ranking) instead
    assert decode(tokens) == " The The quick" and not finished


def test_the_turn_ends_only_where_the_format_allows_it():
    (tokens, finished, _), _ = draft([END, END, END], window=3, fits=no_fox)
    assert (decode(tokens), finished) == (" The The", True)


def test_a_draft_that_nothing_fits_ends_there():
    (tokens, finished, at_boundary), _ = draft(
        [1, 2], window=5, fits=lambda text, finished: not finished and len(text) <= 4
    )
    assert (decode(tokens), finished, at_boundary) == (" The", False, False)


def test_without_a_format_every_sampled_token_is_taken_as_sampled():
    sampler = ScriptSampler([1, 5, END])
    tokens, finished, _ = draft_tokens(
        None,
        lambda _: None,
        sampler,
        end_of_turn=frozenset({END}),
        decode=decode,
        window=5,
        room=100,
    )
    assert (tokens, finished, sampler.taken) == ([1, 5], True, [1, 5, END])


@pytest.mark.parametrize("at_boundary", [False, True])
async def test_the_engine_cuts_back_only_a_draft_that_does_not_end_a_word(at_boundary):
    last = Draft("", 1, finished=True)
    member = ScriptedSession("a", [Draft(" The quick brownies", 3, False, at_boundary), last])
    first = (await events(member))[0]
    assert first.segment == (" The quick brownies" if at_boundary else " The quick")
