"""How fast the ensemble answers, against its members alone and against the reference design.

For each answer length N, on the given members (default: the embedded default ensemble,
window 10, seeded), it measures:

- **tokens/s**: accepted answer tokens per second of wall time;
- **overhead ratio**: our time per answer token over the sum, across members, of each
  member's own time per token when it decodes N tokens alone with ``generate`` (KV cache,
  same sampling), times the drafts it makes a round, measured in the same run;
- **growth ratio**: time per token at the longest length over time per token at the shortest;
- **vs-reference ratio**: the reference design's time per token over ours
  (:mod:`specem_chain.benchmark.reference`);
- first-segment latency, and the mean time per round spent drafting, verifying and accepting;
- the process's peak resident memory.

Models load before any timing. Each figure is reported as min and median over the repeats.
The reference design runs on transformers whatever backend ours uses, so a run may take its
figures from an earlier run's JSON (:func:`reference_figures`) instead of measuring it again.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..backends import Backend, forget_prompts, loaded_backend
from ..engine import EngineConfig, RoundEvent, Seat, run_rounds
from ..engine.types import Message
from ..errors import SpecEMError
from ..members import Member
from ..models import resolve
from ..request import RequestSettings, open_request
from .reference import ReferenceSession

PROMPT: list[Message] = [
    {
        "role": "user",
        "content": "Write the numbers from one to three hundred in words, one per line: "
        "one, two, three, and so on. Do not stop early.",
    }
]
"""A prompt whose answer is long for every member, so each length is reached. It is measured
without the repetition penalty, which is made to stop such a list: with the default 1.1,
10 of 12 seeded answers of the default pair ended before 512 tokens."""


def _summarise(events: list[RoundEvent], wall: float, first: float) -> dict[str, float]:
    return {
        "wall_s": wall,
        "tokens": events[-1].answer_tokens,
        "first_segment_s": first,
        "draft_s": statistics.fmean(e.timing.draft_s for e in events),
        "verify_s": statistics.fmean(e.timing.verify_s for e in events),
        "accept_s": statistics.fmean(e.timing.accept_s for e in events),
    }


def loaded(member: Member) -> Backend:
    """The member's backend, loaded (a built-in one fetched and converted first)."""
    return loaded_backend(resolve(member, progress=False))


async def _timed(events: Any) -> dict[str, float]:
    start, first, seen = time.perf_counter(), 0.0, []
    async for event in events:
        first = first or time.perf_counter() - start
        seen.append(event)
    return _summarise(seen, time.perf_counter() - start, first)


async def _ensemble(members: Sequence[Member], settings: RequestSettings) -> dict[str, float]:
    async with open_request(members, PROMPT, settings) as run:
        return await _timed(update.event async for update in run)


def ensemble_run(members: Sequence[Member], length: int, seed: int) -> dict[str, float]:
    """One answer of (at most) ``length`` tokens with our engine and sessions, from empty
    caches (as a first request)."""
    forget_prompts()
    return asyncio.run(_ensemble(members, RequestSettings(max_tokens=length, seed=seed)))


def reference_run(members: Sequence[Member], length: int, seed: int) -> dict[str, float]:
    """The same answer with the reference design's sessions (no cache, full re-reads), on
    transformers as the reference code runs, whatever backend ours uses."""
    config = EngineConfig(max_tokens=length, seed=seed)
    on_transformers = [m.model_copy(update={"backend": "transformers"}) for m in members]
    seats = [
        Seat(m.label, ReferenceSession(loaded(m), PROMPT), m.sampling) for m in on_transformers
    ]
    return asyncio.run(_timed(run_rounds(seats, config)))


def solo_seconds_per_token(member: Member, length: int, seed: int) -> float:
    """A member's own decoding of exactly ``length`` new tokens on its backend."""
    if member.backend == "llamacpp":
        return _llamacpp_solo(member, length, seed)
    local = loaded(member)
    ids = local.encode(local.template.render(PROMPT))
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        local.model.generate(
            torch.tensor([ids], device=local.device),
            max_new_tokens=length,
            min_new_tokens=length,
            do_sample=True,
            temperature=member.sampling.temperature,
            top_p=member.sampling.top_p,
            pad_token_id=min(local.end_of_turn),
        )
    return (time.perf_counter() - start) / length


def _llamacpp_solo(member: Member, length: int, seed: int) -> float:
    """llama.cpp decoding token by token, as llama.cpp's own generation loop does, with the
    member's end-of-turn tokens masked out; like ``generate``, the clock includes reading
    the prompt."""
    from ..backends.llamacpp import LlamaCppBackend, TokenSampler

    local = loaded(member)
    assert isinstance(local, LlamaCppBackend)
    forget_prompts()
    session = asyncio.run(local.open(PROMPT))
    sample = TokenSampler(local.llm.n_vocab(), member.sampling, seed)
    ids = list(session.ids)
    with local.held(session):
        start = time.perf_counter()
        for _ in range(length):
            logits = local.logits(session, ids, len(ids) - 1)[0]
            logits[list(local.end_of_turn)] = -float("inf")
            ids.append(sample(logits))
        elapsed = time.perf_counter() - start
    asyncio.run(session.aclose())
    return elapsed / length


def full_length_runs(
    run: Callable[[int], dict[str, float]], length: int, repeats: int
) -> list[dict[str, float]]:
    """``repeats`` runs that reach ``length`` answer tokens, trying seeds 0, 1, 2, ... in
    turn: a run whose answer ends early would measure a shorter length."""
    runs: list[dict[str, float]] = []
    for seed in range(4 * repeats):
        if (result := run(seed))["tokens"] >= length:
            runs.append(result)
        if len(runs) == repeats:
            return runs
    raise SpecEMError(
        f"only {len(runs)} of {4 * repeats} seeded answers reached {length} tokens; "
        "measure a shorter length"
    )


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values)}


@dataclass(frozen=True)
class ReferenceFigures:
    """The reference design's time per token (min / median) by length, from an earlier
    run."""

    seconds_per_token: dict[int, dict[str, float]]
    repeats: int
    source: str


def reference_figures(
    path: Path, members: Sequence[Member], lengths: Sequence[int]
) -> ReferenceFigures:
    """The reference design's figures from an earlier run's JSON; that run must have had
    the same members and window, and every length."""
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecEMError(f"cannot read {path}: {error.strerror}") from None
    try:
        earlier = json.loads(text)
        rows = {row["length"]: row["reference_seconds_per_token"] for row in earlier["rows"]}
        repeats, their_members, window = (
            earlier[k] for k in ("reference_repeats", "members", "window")
        )
    except (ValueError, KeyError, TypeError) as error:
        raise SpecEMError(f"{path} is not a speed benchmark's JSON: {error}") from None
    ours = ([m.label for m in members], EngineConfig().window)
    if (their_members, window) != ours:
        raise SpecEMError(
            f"{path} measured members {their_members} with window {window}; this run has "
            f"{ours[0]} with window {ours[1]}"
        )
    if missing := [n for n in lengths if n not in rows]:
        raise SpecEMError(f"{path} has no reference design figures for lengths {missing}")
    return ReferenceFigures(rows, repeats, str(path))


def measure(
    members: Sequence[Member],
    lengths: Sequence[int],
    repeats: int,
    reference_repeats: int,
    progress: Callable[[str], None] = lambda _: None,
    reference: ReferenceFigures | None = None,
) -> dict[str, Any]:
    """Every figure, as one JSON-ready object; the reference design's figures come from
    ``reference`` when given. Every member drafts without the repetition penalty (see
    :data:`PROMPT`)."""
    members = RequestSettings(repeat_penalty=1.0).tuned(members)
    drafts = {m.label: m.sampling.drafts for m in members}
    for member in members:
        loaded(member)
        if reference is None:
            loaded(member.model_copy(update={"backend": "transformers"}))
    rows = []
    for length in lengths:
        progress(f"length {length}: ensemble")
        ours = full_length_runs(partial(ensemble_run, members, length), length, repeats)
        if reference is None:
            progress(f"length {length}: reference design")
            runs = full_length_runs(
                partial(reference_run, members, length), length, reference_repeats
            )
            reference_per_token = _stats([r["wall_s"] / r["tokens"] for r in runs])
        else:
            reference_per_token = reference.seconds_per_token[length]
        progress(f"length {length}: members alone")
        solo = {
            m.label: [solo_seconds_per_token(m, length, seed) for seed in range(repeats)]
            for m in members
        }
        rows.append(_row(length, ours, reference_per_token, solo, drafts))
    first, last = rows[0], rows[-1]
    return {
        "backend": members[0].backend,
        "members": [m.label for m in members],
        "drafts": drafts,
        "window": EngineConfig().window,
        "repeats": repeats,
        "reference_repeats": reference_repeats if reference is None else reference.repeats,
        "reference_from": None if reference is None else reference.source,
        "threads": torch.get_num_threads() if members[0].backend == "transformers" else None,
        "rows": rows,
        "overhead_ratio": {r["length"]: r["overhead_ratio"]["median"] for r in rows},
        "vs_reference_ratio": {r["length"]: r["vs_reference_ratio"]["median"] for r in rows},
        "growth_ratio": last["seconds_per_token"]["median"] / first["seconds_per_token"]["median"],
        "first_segment_s": first["first_segment_s"]["median"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table (min / median over the repeats)."""

    def pair(stats: dict[str, float], digits: int = 2) -> str:
        return f"{stats['min']:.{digits}f} / {stats['median']:.{digits}f}"

    lines = [
        "| answer tokens | tokens/s | overhead ratio | vs reference | first segment (s) "
        "| per round: draft / verify / accept (s, median) |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        split = " / ".join(f"{r['round_s'][s]['median']:.2f}" for s in r["round_s"])
        lines.append(
            f"| {r['length']} | {pair(r['tokens_per_s'])} | {pair(r['overhead_ratio'])} "
            f"| {pair(r['vs_reference_ratio'], 1)} | {pair(r['first_segment_s'])} | {split} |"
        )
    lines.append("")
    lines.append(
        f"Growth ratio (time per token at {result['rows'][-1]['length']} over "
        f"{result['rows'][0]['length']}): {result['growth_ratio']:.2f}. "
        f"Peak RSS: {result['peak_rss_mb']:.0f} MB. Members: {', '.join(result['members'])}; "
        f"backend {result['backend']}; {result['repeats']} repeats "
        f"({result['reference_repeats']} for the reference design"
        + (f", from {result['reference_from']}" if result["reference_from"] else "")
        + "); min / median."
    )
    return "\n".join(lines)


def _row(
    length: int,
    ours: list[dict[str, Any]],
    reference_per_token: dict[str, float],
    solo: dict[str, list[float]],
    drafts: dict[str, int],
) -> dict[str, Any]:
    """One answer length's figures: the ensemble's runs ``ours``, the reference design's
    time per token, each member's time per token alone (one per repeat) and its drafts a
    round, by which its time alone counts in the overhead ratio."""
    ours_per_token = [r["wall_s"] / r["tokens"] for r in ours]
    solo_sum = [
        sum(drafts[label] * values[i] for label, values in solo.items())
        for i in range(len(ours_per_token))
    ]
    return {
        "length": length,
        "answer_tokens": _stats([r["tokens"] for r in ours]),
        "seconds_per_token": _stats(ours_per_token),
        "tokens_per_s": _stats([1 / p for p in ours_per_token]),
        "overhead_ratio": _stats([o / s for o, s in zip(ours_per_token, solo_sum)]),
        "vs_reference_ratio": {
            k: v / statistics.median(ours_per_token) for k, v in reference_per_token.items()
        },
        "reference_seconds_per_token": reference_per_token,
        "first_segment_s": _stats([r["first_segment_s"] for r in ours]),
        "round_s": {
            step: _stats([r[f"{step}_s"] for r in ours]) for step in ("draft", "verify", "accept")
        },
        "solo_seconds_per_token": {k: _stats(v) for k, v in solo.items()},
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Time per token against answer length: ours, the reference design, members alone."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    lengths = [r["length"] for r in result["rows"]]
    figure, axes = pyplot.subplots(figsize=(7, 4.2))
    axes.plot(
        lengths,
        [r["seconds_per_token"]["median"] for r in result["rows"]],
        "o-",
        label="SpecEM (this package)",
    )
    axes.plot(
        lengths,
        [r["reference_seconds_per_token"]["median"] for r in result["rows"]],
        "s--",
        label="reference design (no cache)",
    )
    for member in result["members"]:
        axes.plot(
            lengths,
            [r["solo_seconds_per_token"][member]["median"] for r in result["rows"]],
            ":",
            marker=".",
            label=f"{member} alone",
        )
    drafts = result.get("drafts", {})  # runs made before drafts drew once a round
    axes.plot(
        lengths,
        [
            sum(drafts.get(m, 1) * v["median"] for m, v in r["solo_seconds_per_token"].items())
            for r in result["rows"]
        ],
        "-.",
        label="sum of members alone (times their drafts)",
    )
    axes.set_xlabel("answer length (tokens)")
    axes.set_ylabel("seconds per answer token (median)")
    axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
