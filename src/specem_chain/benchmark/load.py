"""How the ensemble answers under load: several requests at once, with and without
continuous batching (:mod:`specem_chain.backends.batching`).

For each concurrency level C, C requests (different questions, seeds 0..C-1) start
together; a run ends when the last one does. Per level it reports:

- **throughput**: answer tokens of all C requests over the run's wall time;
- **latency**: each request's time to its whole answer (median and p95 over the requests
  of every repeat), and its time to its first segment;
- **peak memory**: the process's resident memory at most during the level's runs.

The runs being compared are interleaved (each repeat runs every level in every mode:
unbatched, batched, unbatched, batched...), so a noisy neighbour bends both alike. Through a
server (``server=URL``, e.g. ``specem serve``), the requests go through the ``openai``
client, streamed; the server decides whether it batches and its memory is not measured.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.types import Message
from ..members import Member
from ..request import RequestSettings, open_request, warm_up

QUESTIONS = [
    "Explain how a refrigerator keeps food cold.",
    "Write a short story about a lighthouse keeper.",
    "What are the main causes of the seasons on Earth?",
    "Describe how to make a cup of tea, step by step.",
    "Why do cats purr? Give a few possible reasons.",
    "Write a letter to a friend about a trip to the mountains.",
    "How does a bicycle stay upright while moving?",
    "List some tips for learning a new language.",
]
"""Open questions with long answers, one per request of a run."""


@dataclass(frozen=True)
class Timed:
    """One request: its time to the whole answer, to the first segment, and its tokens."""

    seconds: float
    first_segment_s: float
    tokens: int


Ask = Callable[[list[Message], int, int], Awaitable[Timed]]
"""Makes one request: its messages, seed and answer length."""


def in_process(members: Sequence[Member]) -> Ask:
    """Requests made in this process, on ``members``."""

    async def ask(messages: list[Message], seed: int, max_tokens: int) -> Timed:
        start = time.perf_counter()
        first = None
        settings = RequestSettings(max_tokens=max_tokens, seed=seed)
        async with open_request(members, messages, settings) as request:
            async for _ in request:
                first = first or time.perf_counter() - start
        tokens = request.answer.usage()["answer_tokens"]
        return Timed(time.perf_counter() - start, first or 0.0, tokens)

    return ask


def through_server(url: str) -> Ask:
    """Requests to an OpenAI-style chat server (``specem serve``) with the ``openai``
    client, streamed; the answer's tokens from specem's provenance (another server's: its
    usage)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=3600)

    async def ask(messages: list[Message], seed: int, max_tokens: int) -> Timed:
        start = time.perf_counter()
        first = None
        tokens = 0
        chunks = await client.chat.completions.create(
            model="specem",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            seed=seed,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter() - start
            provenance = (chunk.model_extra or {}).get("specem") or {}
            answer_tokens = provenance.get("answer_tokens")
            if answer_tokens is not None:  # specem serve's; usage counts every drafted token
                tokens = answer_tokens
            elif chunk.usage is not None and not tokens:
                tokens = chunk.usage.completion_tokens
        return Timed(time.perf_counter() - start, first or 0.0, tokens)

    return ask


class PeakMemory:
    """The process's resident memory at most while in the block (sampled every 10 ms)."""

    def __enter__(self) -> PeakMemory:
        self.peak = resident_bytes()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, resident_bytes())

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())


def resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


async def run_level(ask: Ask, level: int, max_tokens: int) -> tuple[float, list[Timed]]:
    """C = ``level`` requests at once; the wall time until the last one ends, and each."""
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(level)]
    start = time.perf_counter()
    timed = await asyncio.gather(
        *(
            ask([{"role": "user", "content": q}], seed, max_tokens)
            for seed, q in enumerate(questions)
        )
    )
    return time.perf_counter() - start, list(timed)


async def measure(
    modes: dict[str, Ask],
    levels: Sequence[int],
    max_tokens: int,
    repeats: int,
    log: Callable[[str], None],
    *,
    members: dict[str, Sequence[Member]] | None = None,
) -> dict[str, Any]:
    """Every mode at every level, ``repeats`` times, interleaved; see the module. Each
    mode's ``members`` (in-process modes) load first, one mode after the other, so the
    memory each mode's loading took is measured too."""
    loaded: dict[str, float] = {}
    for mode, ensemble in (members or {}).items():
        before = resident_bytes()
        await warm_up(ensemble)
        loaded[mode] = (resident_bytes() - before) / 2**20
    runs: dict[tuple[str, int], list[Run]] = {}
    for repeat in range(repeats):
        for level in levels:
            for mode, ask in modes.items():
                with PeakMemory() as peak:
                    wall, timed = await run_level(ask, level, max_tokens)
                runs.setdefault((mode, level), []).append(Run(wall, timed, peak.peak))
                tokens = sum(t.tokens for t in timed)
                log(f"{mode} x{level} (repeat {repeat + 1}): {tokens} tokens in {wall:.1f} s")
    return {
        "modes": list(modes),
        "levels": list(levels),
        "max_tokens": max_tokens,
        "repeats": repeats,
        "members": sorted({m.label for ensemble in (members or {}).values() for m in ensemble}),
        "loaded_memory_mb": loaded,
        "rows": [
            _row(mode, level, runs[mode, level], memory=bool(members))
            for level in levels
            for mode in modes
        ],
    }


@dataclass(frozen=True)
class Run:
    """One run of a level: its wall time, its requests, the peak memory during it."""

    wall: float
    timed: list[Timed]
    peak: int


def _row(mode: str, level: int, runs: list[Run], *, memory: bool) -> dict[str, Any]:
    every = [t for run in runs for t in run.timed]
    seconds = sorted(t.seconds for t in every)
    firsts = sorted(t.first_segment_s for t in every)
    return {
        "mode": mode,
        "concurrency": level,
        "tokens_per_s": statistics.median(sum(t.tokens for t in r.timed) / r.wall for r in runs),
        "wall_s": statistics.median(r.wall for r in runs),
        "latency_s": {"median": statistics.median(seconds), "p95": percentile(seconds, 0.95)},
        "first_segment_s": {"median": statistics.median(firsts), "p95": percentile(firsts, 0.95)},
        "answer_tokens": statistics.median(t.tokens for t in every),
        "peak_memory_mb": max(r.peak for r in runs) / 2**20 if memory else None,
    }


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def table(result: dict[str, Any]) -> str:
    """The result as a Markdown table, with each level's ratios to one request alone."""
    alone = {r["mode"]: r for r in result["rows"] if r["concurrency"] == 1}
    loaded = ", ".join(f"{m} {mb:.0f} MB" for m, mb in result["loaded_memory_mb"].items())
    lines = [
        f"{result['max_tokens']} answer tokens at most per request; median of "
        f"{result['repeats']} interleaved repeats (latencies over every request)"
        + (f"; memory taken by loading: {loaded}" if loaded else ""),
        "",
        "| mode | requests | answer tokens/s | wall s (ratio to one) | latency median / p95 s "
        "| first segment median / p95 s | peak memory MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        one = alone.get(r["mode"])
        ratio = f" ({r['wall_s'] / one['wall_s']:.2f}x)" if one else ""
        memory = f"{r['peak_memory_mb']:.0f}" if r["peak_memory_mb"] is not None else "n/a"
        lines.append(
            f"| {r['mode']} | {r['concurrency']} | {r['tokens_per_s']:.1f} "
            f"| {r['wall_s']:.1f}{ratio} "
            f"| {r['latency_s']['median']:.1f} / {r['latency_s']['p95']:.1f} "
            f"| {r['first_segment_s']['median']:.2f} / {r['first_segment_s']['p95']:.2f} "
            f"| {memory} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Throughput and p95 latency against the number of concurrent requests, per mode."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (left, right) = pyplot.subplots(1, 2, figsize=(9, 3.8))
    for mode in result["modes"]:
        rows = [r for r in result["rows"] if r["mode"] == mode]
        levels = [r["concurrency"] for r in rows]
        left.plot(levels, [r["tokens_per_s"] for r in rows], "o-", label=mode)
        right.plot(levels, [r["latency_s"]["p95"] for r in rows], "o-", label=mode)
    for axes, label in ((left, "answer tokens per second"), (right, "p95 latency (s)")):
        axes.set_xlabel("concurrent requests")
        axes.set_ylabel(label)
        axes.set_xscale("log", base=2)
        axes.set_xticks(result["levels"], [str(n) for n in result["levels"]])
        axes.grid(True, alpha=0.3)
        axes.set_ylim(bottom=0)  # ratios read true from the height
    left.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
