"""The engine's rules, round by round, with scripted members (no model runs)."""

from __future__ import annotations

import asyncio

import pytest
from scripted import ScriptedSession, events, likes, seat

from specem_chain.engine import AnswerFormat, Seat
from specem_chain.engine.answer_text import LOOP_ROUNDS, LOOP_SPAN, AnswerText
from specem_chain.engine.loop import round_seed
from specem_chain.engine.rounds import REDRAFTS
from specem_chain.engine.types import Draft, Sampling, Segment
from specem_chain.errors import AnswerFormatError, EnsembleError


def test_the_answer_text_holds_back_what_could_start_a_stop_sequence():
    answer = AnswerText(stop=("STOP",), max_tokens=100)
    assert not answer.append("one ST")
    assert answer.release(final=False) == "one "
    assert not answer.append("x")
    assert answer.release(final=False) == "STx"
    assert answer.append(" then STOP here")
    assert answer.text == "one STx then "
    assert answer.release(final=True) == " then "


def test_the_answer_counts_at_least_one_token_a_round_and_stops_at_the_limit():
    answer = AnswerText(stop=(), max_tokens=3)
    assert answer.window(10) == 3
    assert not answer.count(0) and answer.tokens == 1
    assert answer.window(10) == 2
    assert answer.count(5)


async def test_the_weighted_favourite_wins_and_every_member_accepts_it():
    a = ScriptedSession("a", [" alpha", Draft(" end", 1, True)], likes("alpha"))
    b = ScriptedSession("b", [" beta", Draft(" fin", 1, True)], likes("alpha"))
    rounds = await events(a, b)
    assert rounds[0].winner == "a" and rounds[0].segment == " alpha"
    assert a.accepted == b.accepted == [" alpha"]
    assert rounds[-1].finish_reason == "end_of_turn"
    assert "".join(e.text for e in rounds) == " alpha end"


async def test_a_stop_sequence_ends_the_answer_before_it_and_nothing_is_accepted():
    # each draft is cut back to its last word boundary: " one two", " three STOP"
    a = ScriptedSession("a", [" one two ", " three STOP four"])
    rounds = await events(a, stop=("STOP",))
    assert "".join(e.text for e in rounds) == " one two three "
    assert rounds[-1].finish_reason == "stop_sequence"
    assert a.accepted == [" one two"]  # the last segment ends the answer, unaccepted


async def test_the_length_limit_ends_the_answer():
    a = ScriptedSession("a", [" one two three "])  # three tokens a round, as it accepts them
    rounds = await events(a, max_tokens=7)
    assert [e.answer_tokens for e in rounds] == [3, 6, 9]
    assert rounds[-1].finish_reason == "length"


async def test_fast_finish_takes_a_finished_draft_unverified():
    a = ScriptedSession("a", [Draft(" done", 1, True)], likes("going"))
    b = ScriptedSession("b", [" going on"], likes("going"))
    slow, fast = await events(a, b), await events(a, b, fast_finish=True)
    assert slow[0].verified and slow[0].winner == "b"
    assert not fast[0].verified and fast[0].winner == "a"
    assert fast[0].finish_reason == "end_of_turn"


async def test_a_verify_only_member_scores_every_round_but_never_drafts():
    drafter = ScriptedSession("drafter", [" x", " y", Draft("", 1, True)])
    judge = ScriptedSession("judge", [" never"], likes("x"))
    rounds = await events(seat(drafter), seat(judge, "verifier"))
    assert judge.drafted == 0
    assert all(e.verifiers == ("drafter", "judge") for e in rounds if e.verified)
    assert all([c.member for c in e.candidates] == ["drafter"] for e in rounds)
    assert judge.accepted == drafter.accepted


async def test_a_round_of_empty_drafts_is_drafted_again_with_new_seeds():
    a = ScriptedSession("a", ["", "", " finally", Draft("", 1, True)])
    rounds = await events(a)
    assert rounds[0].segment == " finally"
    assert a.seeds[:3] == [round_seed(0, 1, 0, attempt) for attempt in range(3)]
    assert rounds[0].drafted_tokens == {"a": 3}  # every attempt's tokens are counted


async def test_members_that_only_draft_nothing_fail_with_a_clear_error():
    with pytest.raises(EnsembleError, match=f"empty segment {REDRAFTS} times"):
        await events(ScriptedSession("a", [""]), ScriptedSession("b", [""]))


async def test_a_constraint_leaves_out_candidates_before_verification():
    def no_digits(answer: str, segment: Segment) -> Segment | None:
        return None if any(c.isdigit() for c in segment.text) else segment

    a = ScriptedSession("a", [" 42", Draft("", 1, True)], likes("42"))
    b = ScriptedSession("b", [" words", Draft("", 1, True)], likes("42"))
    rounds = await events(a, b, answer_format=AnswerFormat(constraint=no_digits))
    assert [c.member for c in rounds[0].candidates] == ["b"]
    assert rounds[0].winner == "b" and not rounds[0].verified


async def test_no_candidate_fitting_the_format_is_a_clear_error():
    rejected = AnswerFormat(constraint=lambda answer, segment: None)
    with pytest.raises(AnswerFormatError, match="broke the answer's required format"):
        await events(ScriptedSession("a", [" x"]), answer_format=rejected)


async def test_a_prefix_is_accepted_by_every_member_before_the_first_round():
    a, b = ScriptedSession("a", [Draft(" x", 1, True)]), ScriptedSession("b", [" y"])
    rounds = await events(a, b, answer_format=AnswerFormat(prefix="{"))
    assert a.accepted[0] == b.accepted[0] == "{"
    assert rounds[0].text.startswith("{")


async def test_starting_weights_decide_an_unverified_tie_and_are_normalised():
    a = ScriptedSession("a", [Draft(" a", 1, True)])
    b = ScriptedSession("b", [Draft(" b", 1, True)])
    rounds = await events(a, b, weights=[1.0, 3.0], fast_finish=True)
    assert rounds[0].winner == "b"
    assert rounds[0].weights == {"a": 0.25, "b": 0.75}


@pytest.mark.parametrize("weights", [[1.0], [1.0, -1.0], [0.0, 0.0]])
async def test_bad_starting_weights_are_refused(weights):
    with pytest.raises(EnsembleError, match="one non-negative weight per member"):
        await events(ScriptedSession("a"), ScriptedSession("b"), weights=weights)


async def test_a_round_event_carries_what_the_verifiers_said():
    a = ScriptedSession("a", [" aa", Draft("", 1, True)], likes("aa", -0.5, -2.0))
    b = ScriptedSession("b", [" b", Draft("", 1, True)], likes("b", -0.25, -1.0))
    first = (await events(a, b))[0]
    v = first.verification
    assert v is not None and v.verifiers == (0, 1) and v.drafters == (0, 1)
    assert v.means == ((-0.5, -2.0), (-1.0, -0.25))
    assert v.units == (3, 2) and v.tokens == ((3, 2), (3, 2))
    assert set(first.rewards) == {"a", "b"}


async def test_a_member_with_two_drafts_offers_both_and_its_verifier_picks_the_likelier():
    # one member alone: with two drafts a round is verified, and its own scores choose
    a = ScriptedSession("a", [" plain", " likely", Draft("", 1, True)], likes("likely"))
    rounds = await events(Seat("a", a, Sampling(drafts=2)))
    first = rounds[0]
    assert [c.text for c in first.candidates] == [" plain", " likely"]
    assert first.verified and first.segment == " likely"
    assert first.verification is not None and first.verification.drafters == (0, 0)
    # the first draft has the seed a single draft has; the second a seed of its own
    assert a.seeds[:2] == [round_seed(0, 1, 0, 0), round_seed(0, 1, 0, REDRAFTS)]
    assert first.drafted_tokens == {"a": 2}


async def test_a_members_identical_drafts_are_one_candidate():
    a = ScriptedSession("a", [" same", " same", Draft("", 1, True)])
    b = ScriptedSession("b", [" other", Draft("", 1, True)])
    first = (await events(Seat("a", a, Sampling(drafts=2)), b))[0]
    assert [(c.member, c.text) for c in first.candidates] == [("a", " same"), ("b", " other")]


async def test_one_draft_a_round_is_unchanged_by_the_drafts_setting():
    # drafts=1 (the default) gives the seeds and candidates one draft always had
    a = ScriptedSession("a", [" x", Draft("", 1, True)])
    b = ScriptedSession("b", [" y", Draft("", 1, True)])
    rounds = await events(Seat("a", a, Sampling(drafts=1)), b)
    assert a.seeds[0] == round_seed(0, 1, 0, 0) and b.seeds[0] == round_seed(0, 1, 1, 0)
    assert [c.member for c in rounds[0].candidates] == ["a", "b"]


LINE = " The cat sat on the mat all day. "
"""A sentence of 30 characters (stripped): long enough to repeat the answer."""


def test_the_answer_repeats_a_segment_of_loop_span_characters_it_already_holds():
    answer = AnswerText(stop=(), max_tokens=100, text="One.  The cat sat on the mat all day.")
    assert answer.repeats(LINE)  # outer whitespace does not count
    assert not answer.repeats(" The cat sat on the mat.")  # 23 characters: a phrase may recur
    assert not answer.repeats(" The dog sat on the mat all day.")
    assert len("The cat sat on the mat.") < LOOP_SPAN <= len(LINE.strip())


def test_a_loop_is_loop_rounds_in_a_row_that_repeat_the_answer():
    answer = AnswerText(stop=(), max_tokens=100)
    for _ in range(LOOP_ROUNDS - 1):
        answer.append(LINE)
        assert not answer.goes_round([Segment(LINE)])
    answer.append(LINE)
    assert answer.repeating == LOOP_ROUNDS - 1
    assert answer.goes_round([Segment(LINE), Segment(LINE.upper() + "x")]) is False  # one fresh
    assert not answer.goes_round([Segment(LINE, finished=True)])  # ending the answer is no loop
    assert answer.goes_round([Segment(LINE), Segment(LINE.strip())])
    answer.append(" And then it slept, for it was late. ")
    assert answer.repeating == 0 and not answer.goes_round([Segment(LINE)])


LOOPING = [LINE] * LOOP_ROUNDS
"""Drafts that repeat the answer LOOP_ROUNDS - 1 times, so the next one would make a loop."""

GUARDED = Sampling(loop_penalty=1.3)


async def test_a_round_that_would_make_a_loop_is_drafted_again_under_the_loop_penalty():
    a = ScriptedSession("a", [*LOOPING, LINE, " Then it slept. ", Draft("", 1, True)])
    rounds = await events(Seat("a", a, GUARDED))
    n = LOOP_ROUNDS
    assert [e.segment for e in rounds[n - 1 : n + 1]] == [LINE.rstrip(), " Then it slept."]
    assert [e.loop_redraft for e in rounds] == [False] * n + [True, False]
    assert [s.repeat_penalty for s in a.samplings] == [1.1] * (n + 1) + [1.3, 1.1]
    assert a.seeds[n + 1] == round_seed(0, n + 1, 0, 1)  # the redraft has a new seed
    assert rounds[n].drafted_tokens == {"a": 2}  # both attempts count


async def test_a_loop_is_redrafted_once_a_round_and_then_taken():
    # the penalised redraft repeats too: it is accepted, the answer goes on to its limit
    a = ScriptedSession("a", [LINE])
    rounds = await events(Seat("a", a, GUARDED), max_tokens=7 * (LOOP_ROUNDS + 2))
    assert [e.loop_redraft for e in rounds] == [False] * LOOP_ROUNDS + [True, True]
    assert a.drafted == LOOP_ROUNDS + 4
    assert rounds[-1].finish_reason == "length"


async def test_one_guarded_drafter_redrafts_the_round_and_each_keeps_its_own_penalties():
    a = ScriptedSession("a", [*LOOPING, LINE, " Then it slept. ", Draft("", 1, True)], likes("cat"))
    b = ScriptedSession("b", [*LOOPING, LINE, " Then it woke. ", Draft("", 1, True)], likes("cat"))
    unguarded = Sampling(repeat_penalty=1.05)
    rounds = await events(Seat("a", a, GUARDED), Seat("b", b, unguarded))
    assert rounds[LOOP_ROUNDS].loop_redraft
    assert a.samplings[LOOP_ROUNDS + 1].repeat_penalty == 1.3
    assert b.samplings[LOOP_ROUNDS + 1].repeat_penalty == 1.05  # new seed only
    assert b.seeds[LOOP_ROUNDS + 1] == round_seed(0, LOOP_ROUNDS + 1, 1, 1)


async def test_no_redraft_without_a_loop_penalty_or_when_a_candidate_moves_on():
    looping = [*LOOPING, LINE, Draft("", 1, True)]
    alone = await events(ScriptedSession("a", looping))  # loop_penalty=1: never
    assert not any(e.loop_redraft for e in alone)
    assert [e.segment for e in alone[:-1]] == [LINE.rstrip()] * (LOOP_ROUNDS + 1)
    # the verifiers back the looping draft, so the answer repeats itself round after round;
    # but b always offers a way out, so no round would make a loop
    bird = " Birds sang all through the long day. "
    a = ScriptedSession("a", looping, likes("cat"))
    b = ScriptedSession("b", [bird] * (LOOP_ROUNDS + 1) + [Draft("", 1, True)], likes("cat"))
    pair = await events(Seat("a", a, GUARDED), Seat("b", b, GUARDED))
    assert [e.winner for e in pair[: LOOP_ROUNDS + 1]] == ["a"] * (LOOP_ROUNDS + 1)
    assert not any(e.loop_redraft for e in pair)


async def test_a_finished_or_short_repeat_is_no_loop():
    ends = ScriptedSession("a", [*LOOPING, Draft(LINE.rstrip(), 1, True)])
    phrase = " It sat on the mat. "
    short = ScriptedSession("a", [phrase] * (LOOP_ROUNDS + 1) + [Draft("", 1, True)])
    for member in (ends, short):
        rounds = await events(Seat("a", member, GUARDED))
        assert not any(e.loop_redraft for e in rounds)


async def test_a_members_own_stronger_penalty_is_kept_in_a_loop_redraft():
    a = ScriptedSession("a", [*LOOPING, LINE, " Then it slept. ", Draft("", 1, True)])
    await events(Seat("a", a, Sampling(repeat_penalty=1.5, loop_penalty=1.3)))
    assert {s.repeat_penalty for s in a.samplings} == {1.5}


async def test_a_round_times_each_member_in_the_step_it_took_part_in():
    class Slow(ScriptedSession):
        async def draft(self, *args, **kwargs) -> Draft:
            await asyncio.sleep(0.05)
            return await super().draft(*args, **kwargs)

        async def score(self, candidates, scoring):
            await asyncio.sleep(0.03)
            return await super().score(candidates, scoring)

    slow = Slow("slow", [" x", Draft(" end", 1, True)], likes("x"))
    judge = ScriptedSession("judge", [" never"], likes("x"))
    alone = ScriptedSession("alone", [" y"])
    rounds = await events(seat(slow), seat(judge, "verifier"))
    for e in rounds:  # one candidate a round: no verification, nobody scored
        assert set(e.timing.drafting) == {"slow"} and e.timing.drafting["slow"] >= 0.05
        assert e.timing.drafting["slow"] <= e.timing.draft_s and e.timing.scoring == {}
    verified = (await events(slow, alone, max_tokens=1))[0]
    assert verified.verified and set(verified.timing.scoring) == {"slow", "alone"}
    assert verified.timing.scoring["slow"] >= 0.03 > verified.timing.scoring["alone"]
    assert max(verified.timing.scoring.values()) <= verified.timing.verify_s
