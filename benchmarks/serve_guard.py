"""``specem serve``'s guard under load: admission control with four times as many clients
as answer slots, and requests with a wrong key.

    ./run python benchmarks/serve_guard.py --out docs/benchmarks/serve-guard
        -m vllm+http://127.0.0.1:8001 --member-metrics http://127.0.0.1:8001/metrics
        --concurrent 2 --rounds 5

(one command line). It starts ``specem serve --max-concurrent-requests N --max-queue 0
--api-key KEY`` on the members, waits until ``/ready`` answers 200, answers one request to
warm up, then:

1. **alone**: ``--rounds`` rounds of N streaming clients at once, each round started when
   the last ended: the answers' latency with the server full but not past it;
2. **overload**: ``--rounds`` rounds of 4N streaming clients started at once: N are admitted
   (the queue is 0: a request either gets a slot or a 429), the others refused. Each request
   ends ``ok`` (``[DONE]``), ``refused`` (429, timed to its status line), ``error`` (any other
   answer) or ``hang`` (nothing within ``--timeout``);
3. **wrong key**: ``--wrong-keys`` requests (1,000) with a key the server does not have,
   ``--wrong-concurrency`` at a time: each must be a 401; the members' own counters (every
   counter at each ``--member-metrics`` URL but the process's CPU time) and the server's
   drafting and request counters must not move.

It reports p50 and p99 of each, the accepted answers' p50 over the alone p50, and writes
``OUT.json`` and ``OUT.md``. Timings are of this machine, with the server, its members and
the clients sharing its cores: compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from serve_faults import specem_serve, streamed_question

from specem_chain.benchmark.load import QUESTIONS, percentile

KEY = "sk-serve-guard-benchmark"
WRONG = "sk-not-this-servers-key"


@dataclass
class Asked:
    phase: str
    index: int
    outcome: str = "hang"
    seconds: float | None = None
    """To the end of the answer (``ok``), or to the status line (``refused``, ``error``)."""
    status: int | None = None


async def ask(client: httpx.AsyncClient, asked: Asked, max_tokens: int, timeout: float) -> None:
    body = streamed_question(asked.index, max_tokens)
    started = time.perf_counter()

    async def run() -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            asked.status = response.status_code
            if response.status_code != 200:
                asked.seconds = time.perf_counter() - started
                asked.outcome = "refused" if response.status_code == 429 else "error"
                await response.aread()
                return
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    asked.outcome, asked.seconds = "ok", time.perf_counter() - started
                elif line.startswith('data: {"error"'):
                    asked.outcome = "error"

    try:
        await asyncio.wait_for(run(), timeout)
    except asyncio.TimeoutError:
        asked.outcome = "hang"


async def rounds(
    base: str, phase: str, clients: int, count: int, max_tokens: int, timeout: float
) -> list[Asked]:
    """``count`` rounds of ``clients`` requests started together."""
    done: list[Asked] = []
    limits = httpx.Limits(max_connections=clients)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        base_url=base, headers=headers, timeout=timeout, limits=limits
    ) as client:
        for number in range(count):
            batch = [Asked(phase, number * clients + i) for i in range(clients)]
            await asyncio.gather(*(ask(client, a, max_tokens, timeout) for a in batch))
            done += batch
    return done


def counters(url: str, prefix: str = "") -> dict[str, float]:
    """Every counter sample a Prometheus endpoint shows (whose name has ``prefix``), but the
    process's own (``process_cpu_seconds_total``), which moves whether or not it is asked."""
    text = httpx.get(url, timeout=30).text
    return {
        f"{s.name}{json.dumps(s.labels, sort_keys=True) if s.labels else ''}": s.value
        for family in text_string_to_metric_families(text)
        if family.type == "counter"
        for s in family.samples
        if s.name.startswith(prefix)
        and not s.name.startswith("process_")
        and (s.name.endswith("_total") or s.name == family.name)
    }


async def wrong_keys(base: str, count: int, concurrency: int) -> tuple[list[float], list[int]]:
    """``count`` requests with a wrong key: their seconds and statuses."""
    seconds: list[float] = []
    statuses: list[int] = []
    body = {"model": "specem", "messages": [{"role": "user", "content": QUESTIONS[0]}]}
    headers = {"Authorization": f"Bearer {WRONG}"}
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:

        async def one() -> None:
            async with gate:
                started = time.perf_counter()
                response = await client.post("/v1/chat/completions", json=body)
                seconds.append(time.perf_counter() - started)
                statuses.append(response.status_code)

        await asyncio.gather(*(one() for _ in range(count)))
    return seconds, statuses


def quantiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p99": None, "n": 0}
    return {"p50": percentile(ordered, 0.5), "p99": percentile(ordered, 0.99), "n": len(ordered)}


def changed(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0) - v for k, v in before.items() if after.get(k, 0) != v}


def table(result: dict[str, Any]) -> str:
    n = result["concurrent"]
    alone, over, wrong = result["alone"], result["overload"], result["wrong_key"]
    ms = lambda s: "-" if s is None else f"{s * 1000:.1f} ms"  # noqa: E731
    sec = lambda s: "-" if s is None else f"{s:.2f} s"  # noqa: E731
    rows = [
        "| phase | requests | outcomes | p50 | p99 |",
        "|---|---|---|---|---|",
        f"| alone: {n} clients | {alone['requests']} | {alone['outcomes']} | "
        f"{sec(alone['ok']['p50'])} | {sec(alone['ok']['p99'])} |",
        f"| overload: {4 * n} clients, accepted | {over['ok']['n']} | {over['outcomes']} | "
        f"{sec(over['ok']['p50'])} | {sec(over['ok']['p99'])} |",
        f"| overload: refused (429) | {over['refused']['n']} | | {ms(over['refused']['p50'])} | "
        f"{ms(over['refused']['p99'])} |",
        f"| wrong key (401) | {wrong['requests']} | {wrong['statuses']} | "
        f"{ms(wrong['seconds']['p50'])} | {ms(wrong['seconds']['p99'])} |",
    ]
    ratio = result["accepted_p50_over_alone_p50"]
    notes = [
        f"accepted answers' p50 / alone p50: {'-' if ratio is None else f'{ratio:.2f}'}",
        f"members' counters moved by the wrong-key requests: {wrong['members_changed']}",
        f"server's own counters changed by them: {wrong['server_changed']}",
    ]
    return "\n".join(rows) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


async def measure(base: str, args: argparse.Namespace) -> dict[str, Any]:
    n = args.concurrent
    await rounds(base, "warm-up", 1, 1, args.max_tokens, args.timeout)
    alone = await rounds(base, "alone", n, args.rounds, args.max_tokens, args.timeout)
    over = await rounds(base, "overload", 4 * n, args.rounds, args.max_tokens, args.timeout)
    members_before = {url: counters(url) for url in args.member_metrics}
    server_before = counters(f"{base}/metrics", "specem_")
    seconds, statuses = await wrong_keys(base, args.wrong_keys, args.wrong_concurrency)
    members_after = {url: counters(url) for url in args.member_metrics}
    server_changed = changed(server_before, counters(f"{base}/metrics", "specem_"))

    def summary(asked: list[Asked]) -> dict[str, Any]:
        outcomes: dict[str, int] = {}
        for a in asked:
            outcomes[a.outcome] = outcomes.get(a.outcome, 0) + 1
        return {
            "requests": len(asked),
            "outcomes": outcomes,
            "ok": quantiles([a.seconds for a in asked if a.outcome == "ok" and a.seconds]),
            "refused": quantiles(
                [a.seconds for a in asked if a.outcome == "refused" and a.seconds]
            ),
        }

    alone_s, over_s = summary(alone), summary(over)
    ratio = (
        over_s["ok"]["p50"] / alone_s["ok"]["p50"]
        if over_s["ok"]["p50"] and alone_s["ok"]["p50"]
        else None
    )
    return {
        "members": args.members,
        "concurrent": n,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "alone": alone_s,
        "overload": over_s,
        "accepted_p50_over_alone_p50": ratio,
        "wrong_key": {
            "requests": len(statuses),
            "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
            "seconds": quantiles(seconds),
            "members_changed": {
                url: changed(members_before[url], members_after[url]) for url in args.member_metrics
            },
            "server_changed": server_changed,
        },
        "asked": [asdict(a) for a in alone + over],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="OUT: writes OUT.json, OUT.md")
    parser.add_argument("-m", "--member", dest="members", action="append", required=True)
    parser.add_argument("--member-metrics", action="append", default=[], metavar="URL")
    parser.add_argument("--concurrent", type=int, default=2, help="N: answer slots")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=600, help="a request's client timeout")
    parser.add_argument("--wrong-keys", type=int, default=1000)
    parser.add_argument("--wrong-concurrency", type=int, default=4)
    parser.add_argument("--port", type=int, default=8470)
    args = parser.parse_args()
    options = ["--max-concurrent-requests", str(args.concurrent), "--max-queue", "0"]
    options += ["--api-key", KEY]
    log = args.out.with_suffix(".serve.log")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with specem_serve(args.members, args.port, log, options) as base:
        result = asyncio.run(measure(base, args))
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table(result))
    log.unlink(missing_ok=True)
    print(table(result))
    wrong = result["wrong_key"]
    if set(wrong["statuses"]) != {"401"} or any(wrong["members_changed"].values()):
        sys.exit("a wrong key was answered, or a member was asked")


if __name__ == "__main__":
    main()
