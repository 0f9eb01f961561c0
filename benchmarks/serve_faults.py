"""``specem serve`` under load while a member's server dies and comes back.

    ./run python benchmarks/serve_faults.py --out docs/benchmarks/serve-faults-vllm
        -m vllm+http://127.0.0.1:8001 -m vllm+http://127.0.0.1:8002 --faulty 2
        --kill "benchmarks/vllm-cpu-server kill 8002"
        --restart "benchmarks/vllm-cpu-server start 8002 1"

(one command line). It starts ``specem serve --workers 2`` on the members, waits until
``/ready`` answers 200, and sends ``--requests`` chat completions from ``--clients``
concurrent streaming clients (open questions, seeds 0..N-1), each with a client timeout of
``--timeout`` seconds. Once ``--kill-after`` answers have ended it runs ``--kill`` (the
faulty member's server dies, as a crash would), waits ``--down`` seconds, runs
``--restart`` and polls the faulty member's ``/health`` until it answers 200. Meanwhile it
polls ``/ready`` every second.

Each request ends one of four ways: ``ok`` (the stream ended with ``[DONE]``); ``error``
(an HTTP error with an OpenAI error body, or an error event in the stream: the client
reads why); ``timeout`` (no end within ``--timeout``: a hang); ``broken`` (the connection
closed without ``[DONE]`` or an error). Per request it records its times, its outcome and,
for an answer, whether the faulty member took part (verified at least one of its rounds).
It reports the requests by phase (ended before the kill; overlapping the outage, from the
kill to the member's ``/health``; started after it), p50 and p95 latency, whether the
faulty member took part in every answer started after it was back, what ``/ready`` said in
each phase, and ``specem serve``'s own ``/metrics`` counts over the run. Writes ``OUT.json`` and
``OUT.md``.

Against GPU servers, give their addresses with ``-m`` and commands that stop and start the
faulty one (``ssh host systemctl kill vllm``, ``kubectl delete pod ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specem_chain.backends.vllm import api_root
from specem_chain.benchmark.load import QUESTIONS, percentile
from specem_chain.members import member_list

SPECEM = str(Path(sys.executable).parent / "specem")


@dataclass
class Asked:
    """One request: when it started, got its first segment and ended (seconds from the
    run's start), how it ended, and which members verified its rounds."""

    index: int
    started: float
    first: float | None = None
    ended: float | None = None
    outcome: str = "timeout"
    error: str | None = None
    members: list[str] = field(default_factory=list)
    """Members that verified at least one round of the answer."""
    rounds: int = 0

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass
class Timeline:
    killed: float | None = None
    restarted: float | None = None
    healthy: float | None = None
    ready: list[tuple[float, int, int]] = field(default_factory=list)
    """``/ready`` polls: (time, status, ready members)."""


@contextmanager
def specem_serve(
    members: list[str], port: int, log: Path, options: Sequence[str] = ()
) -> Iterator[str]:
    """``specem serve`` on the members with ``options`` until the block ends; its base URL
    once ready."""
    command = [SPECEM, "serve", "--port", str(port), *options]
    for member in members:
        command += ["-m", member]
    with log.open("wb") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"specem serve did not start:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/ready", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=120)


def streamed_question(index: int, max_tokens: int) -> dict[str, Any]:
    """The ``index``-th request's body: an open question (in turn), seeded by ``index``."""
    return {
        "model": "specem",
        "messages": [{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}],
        "max_tokens": max_tokens,
        "seed": index,
        "stream": True,
    }


async def ask(
    client: httpx.AsyncClient, base: str, asked: Asked, max_tokens: int, clock: float
) -> None:
    """One streamed chat completion, recorded in ``asked`` as it goes."""
    body = streamed_question(asked.index, max_tokens)
    members: set[str] = set()
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            asked.outcome, asked.error = "error", f"{response.status_code}: {response.text}"
            return
        asked.outcome = "broken"
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                asked.outcome = "ok"
                break
            chunk = json.loads(data)
            if "error" in chunk:
                asked.outcome, asked.error = "error", json.dumps(chunk["error"])
                break
            for segment in (chunk.get("specem") or {}).get("segments", []):
                asked.first = asked.first or time.perf_counter() - clock
                asked.rounds += 1
                members.update(segment["verifiers"])
    asked.members = sorted(members)


async def client_loop(
    queue: asyncio.Queue[Asked],
    client: httpx.AsyncClient,
    base: str,
    args: argparse.Namespace,
    clock: float,
    ended: asyncio.Queue[None],
) -> None:
    while not queue.empty():
        asked = queue.get_nowait()
        asked.started = time.perf_counter() - clock
        try:
            await asyncio.wait_for(ask(client, base, asked, args.max_tokens, clock), args.timeout)
        except TimeoutError:
            asked.outcome = "timeout"
        except httpx.HTTPError as error:
            asked.outcome, asked.error = "broken", repr(error)
        asked.ended = time.perf_counter() - clock
        ended.put_nowait(None)


async def shell(command: str) -> None:
    process = await asyncio.create_subprocess_exec(*shlex.split(command))
    if await process.wait():
        raise SystemExit(f"{command!r} failed")


async def fault(
    args: argparse.Namespace,
    health: str,
    timeline: Timeline,
    ended: asyncio.Queue[None],
    clock: float,
) -> None:
    """Kill the faulty member's server once ``--kill-after`` answers ended, start it again
    ``--down`` seconds later, and wait for its ``/health``."""
    for _ in range(args.kill_after):
        await ended.get()
    await shell(args.kill)
    timeline.killed = time.perf_counter() - clock
    await asyncio.sleep(args.down)
    await shell(args.restart)
    timeline.restarted = time.perf_counter() - clock
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            try:
                if (await client.get(health)).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
    timeline.healthy = time.perf_counter() - clock


async def watch_ready(base: str, timeline: Timeline, clock: float) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        while True:
            try:
                response = await client.get(f"{base}/ready")
                ready = response.json().get("ready_members", 0)
                timeline.ready.append((time.perf_counter() - clock, response.status_code, ready))
            except (httpx.HTTPError, ValueError):
                timeline.ready.append((time.perf_counter() - clock, 0, 0))
            await asyncio.sleep(1)


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    members = member_list(args.members)
    faulty = members[args.faulty - 1]
    health = f"{api_root(str(faulty.source))}/health"
    log = Path(tempfile.gettempdir()) / "specem-serve-faults.log"
    with specem_serve(args.members, args.port, log, ["--workers", str(args.workers)]) as base:
        names = [m["member"] for m in httpx.get(f"{base}/ready", timeout=10).json()["members"]]
        name = names[args.faulty - 1]
        async with httpx.AsyncClient(timeout=None) as client:  # warm every worker's members
            for seed in range(2 * args.workers):
                await ask(client, base, Asked(seed, 0.0), args.max_tokens, 0.0)
        before = scrape(base)
        timeline = Timeline()
        clock = time.perf_counter()
        queue: asyncio.Queue[Asked] = asyncio.Queue()
        asked = [Asked(i, 0.0) for i in range(args.requests)]
        for each in asked:
            queue.put_nowait(each)
        ended: asyncio.Queue[None] = asyncio.Queue()
        limits = httpx.Limits(max_connections=args.clients)
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:
            watcher = asyncio.create_task(watch_ready(base, timeline, clock))
            faults = asyncio.create_task(fault(args, health, timeline, ended, clock))
            await asyncio.gather(
                *(client_loop(queue, client, base, args, clock, ended) for _ in range(args.clients))
            )
            wall = time.perf_counter() - clock
            watcher.cancel()
            faults.cancel()  # the run ended first (then the report says so)
        after = scrape(base)
    counts = {
        key[0] + "".join(f"{{{k}={v}}}" for k, v in key[1]): after[key] - before.get(key, 0.0)
        for key in after
        if key[0].startswith(("specem_requests_total", "specem_members_dropped_total"))
    }
    return {
        "members": names,
        "faulty": name,
        "requests": args.requests,
        "clients": args.clients,
        "workers": args.workers,
        "max_tokens": args.max_tokens,
        "timeout_s": args.timeout,
        "wall_s": wall,
        "timeline": asdict(timeline),
        "asked": [asdict(a) for a in asked],
        "metrics": counts,
    }


def phase(a: dict[str, Any], timeline: dict[str, Any]) -> str:
    if a["ended"] is not None and a["ended"] < timeline["killed"]:
        return "before the kill"
    if timeline["healthy"] is not None and a["started"] >= timeline["healthy"]:
        return "after it was back"
    return "across the outage"


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Counts and latencies by phase, and the verdicts the docs quote."""
    timeline, faulty = result["timeline"], result["faulty"]
    rows = {}
    for name in ("before the kill", "across the outage", "after it was back", "all"):
        group = [a for a in result["asked"] if name == "all" or phase(a, timeline) == name]
        ok = sorted(a["ended"] - a["started"] for a in group if a["outcome"] == "ok")
        answered = [a for a in group if a["outcome"] == "ok"]
        rows[name] = {
            "requests": len(group),
            **{o: sum(a["outcome"] == o for a in group) for o in ("ok", "error", "timeout")},
            "broken": sum(a["outcome"] == "broken" for a in group),
            "p50_s": percentile(ok, 0.5) if ok else None,
            "p95_s": percentile(ok, 0.95) if ok else None,
            "with_faulty": sum(faulty in a["members"] for a in answered),
        }
    errors = sorted({a["error"] for a in result["asked"] if a["error"]})
    members = len(result["members"])
    ready: dict[str, dict[str, int]] = {}
    for at, status, count in timeline["ready"]:
        name = (
            "before the kill"
            if at < timeline["killed"]
            else "after it was back"
            if timeline["healthy"] is not None and at >= timeline["healthy"]
            else "across the outage"
        )
        kind = "503" if status != 200 else "200, all" if count == members else f"200, {count}"
        ready.setdefault(name, {}).setdefault(kind, 0)
        ready[name][kind] += 1
    return {"phases": rows, "errors": errors, "ready": ready}


def table(result: dict[str, Any]) -> str:
    s, t = summary(result), result["timeline"]
    lines = [
        f"{result['requests']} requests from {result['clients']} concurrent streaming clients "
        f"through `specem serve --workers {result['workers']}` (members: "
        f"{', '.join(result['members'])}; at most {result['max_tokens']} answer tokens; "
        f"client timeout {result['timeout_s']:.0f} s), {result['wall_s']:.0f} s in all. "
        f"{result['faulty']}'s server was killed at {t['killed']:.0f} s, started again at "
        f"{t['restarted']:.0f} s and "
        + (
            f"healthy at {t['healthy']:.0f} s."
            if t["healthy"] is not None
            else "not healthy again before the run ended."
        ),
        "",
        "| requests | n | ok | clear error | hung (timeout) | broken | p50 s | p95 s "
        f"| answers {result['faulty']} took part in |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in s["phases"].items():
        p50 = f"{r['p50_s']:.1f}" if r["p50_s"] is not None else "n/a"
        p95 = f"{r['p95_s']:.1f}" if r["p95_s"] is not None else "n/a"
        lines.append(
            f"| {name} | {r['requests']} | {r['ok']} | {r['error']} | {r['timeout']} "
            f"| {r['broken']} | {p50} | {p95} | {r['with_faulty']} of {r['ok']} |"
        )
    lines += ["", "`/ready`, polled every second (status, members ready: polls):", ""]
    for name, kinds in s["ready"].items():
        lines.append(f"- {name}: " + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())))
    if s["errors"]:
        lines += ["", "Errors the clients read:", ""]
        lines += [f"- `{e[:300]}`" for e in s["errors"]]
    counts = ", ".join(f"`{k}` {v:g}" for k, v in sorted(result["metrics"].items()) if v)
    lines += ["", f"`specem serve`'s `/metrics` over the run: {counts}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-m", "--member", dest="members", action="append")
    parser.add_argument("--faulty", type=int, default=2, help="the member to kill (1-based)")
    parser.add_argument("--kill", help="a command that kills its server")
    parser.add_argument("--restart", help="a command that starts it again")
    parser.add_argument("--kill-after", type=int, default=24, help="answers ended before it")
    parser.add_argument("--down", type=float, default=10.0, help="seconds before the restart")
    parser.add_argument("--requests", type=int, default=192)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--timeout", type=float, default=300.0, help="each request's, client side")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tables-from", action="store_true", help="only rewrite OUT.md")
    args = parser.parse_args()
    if args.tables_from:
        result = json.loads(args.out.with_suffix(".json").read_text())
    else:
        if not (args.members and args.kill and args.restart):
            parser.error("give the members (-m), --kill and --restart")
        result = asyncio.run(run(args))
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(result) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
