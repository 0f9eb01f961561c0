r"""What an ensemble of members on servers costs at RAG-length prompts: retrieved passages,
then a question, at about 200, 2,000 and 6,000 tokens.

    ./run python benchmarks/rag_context.py --out docs/benchmarks/rag-context-vllm \
        -m vllm+http://127.0.0.1:8001 -m vllm+http://127.0.0.1:8002

For each prompt length, from a cold cache (each server's ``POST /reset_prefix_cache``, which
vLLM serves when started with ``VLLM_SERVER_DEV_MODE=1``; without it each answer's prompt
starts with a word of its own), it answers the prompt with each member alone, then with the
ensemble once per scoring route (``--routes``: ``auto`` is the route the member finds at its
first check; vLLM members also take ``prompt_logprobs``, the route before the cached one,
``echo``, ``allowed_token_ids``, ``logprob_token_ids``), same seed and settings, and reports per
answer:

- the wall time and answer tokens, and the **overhead ratio**: the ensemble's seconds per
  answer token over the sum of its members' own seconds per answer token (as ``specem
  bench`` reports it for members in process);
- the prompt tokens each vLLM server computed and read from its prefix cache (its own
  ``vllm:prompt_tokens_by_source_total`` counters, before and after the answer);
- each server's peak resident memory while the answer ran (its process and children,
  sampled every 50 ms), for servers on this machine.

It also says whether each route's ensemble answer is the ``auto`` one's, word for word.
Writes ``OUT.json`` and ``OUT.md``. Members on other servers (llama-cpp-python's, given as
``openai+``, or as a member's JSON to set its ``tokenizer``) are timed the same way; they
have no such counters.

With ``--scoring`` it times one thing instead, for each member and prompt length: scoring
the member's own greedy 10-token draft after the prompt, once the draft has read the
prompt (so a cache holds it), on each of ``--routes`` for a vLLM member (median of
``--repeats``), with the prompt tokens its server computed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from specem_chain import SpecEMChatModel
from specem_chain.backends import loaded_backend
from specem_chain.backends.vllm import VLLMBackend, api_root
from specem_chain.engine.types import Sampling, Segment
from specem_chain.members import Member, member_list

COUNTER = "vllm:prompt_tokens_by_source"
"""vLLM's count of prompt tokens by where they came from (``local_compute``,
``local_cache_hit``)."""

PRODUCTS = ["kettle", "blender", "toaster", "heater", "lamp", "fan", "grinder", "scale"]
COLOURS = ["red", "slate", "ivory", "teal", "amber", "black", "copper", "olive"]
TOWNS = ["Leeds", "Porto", "Lyon", "Graz", "Turku", "Bergen", "Cork", "Basel"]


def passage(n: int, rng: random.Random) -> str:
    """One retrieved passage: a product's sheet, made up but varied."""
    product, colour, town = rng.choice(PRODUCTS), rng.choice(COLOURS), rng.choice(TOWNS)
    return (
        f"[{n}] The Orla {product} model {n} comes in {colour}, weighs "
        f"{rng.randint(4, 40) / 10} kg and draws {rng.randint(3, 22) * 100} watts. It is "
        f"assembled in {town}, carries a "
        f"{rng.randint(1, 5)}-year warranty and costs {rng.randint(19, 249)} euros. Reviewers "
        f"rate it {rng.randint(30, 50) / 10} of 5; the most common complaint is "
        f"{rng.choice(['the noise', 'the short cord', 'the lid', 'the price', 'the manual'])}."
    )


async def rag_messages(
    member: Member, tokens: int, lead: str = ""
) -> tuple[list[dict[str, str]], int]:
    """Passages until the prompt is about ``tokens`` long in ``member``'s tokenizer, then a
    question about one of them; and the prompt's length there."""
    rng = random.Random(0)
    backend = loaded_backend(member)
    question = "According to the passages, what does the Orla model 1 cost, and how heavy is it?"
    passages: list[str] = []
    while True:
        system = f"{lead}Answer from the retrieved passages only.\n\n" + "\n".join(passages)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        if (count := await backend.count(messages)) >= tokens:  # type: ignore[arg-type]
            return messages, count
        passages.append(passage(len(passages) + 1, rng))


@dataclass
class Server:
    """One member's server: its address, and what can be read of it from here."""

    url: str
    dev: bool = False
    """It serves ``/reset_prefix_cache``."""
    block_size: int | None = None
    process: psutil.Process | None = None

    @classmethod
    def of(cls, member: Member) -> Server:
        server = cls(api_root(member.source))
        metrics = server.metrics()
        for family in metrics:
            if family.name == "vllm:cache_config_info":
                server.block_size = int(family.samples[0].labels["block_size"])
        server.dev = server.reset()
        port = urlsplit(server.url).port
        if urlsplit(server.url).hostname in ("127.0.0.1", "localhost"):
            for connection in psutil.net_connections("tcp"):
                if connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
                    server.process = psutil.Process(connection.pid)
        return server

    def metrics(self) -> list[Any]:
        try:
            response = httpx.get(f"{self.url}/metrics", timeout=10)
        except httpx.HTTPError:
            return []
        if response.status_code != 200:  # not a vLLM server
            return []
        return list(text_string_to_metric_families(response.text))

    def prompt_tokens(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for family in self.metrics():
            if family.name == COUNTER:
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        found[sample.labels["source"]] = sample.value
        return found

    def reset(self) -> bool:
        try:
            return httpx.post(f"{self.url}/reset_prefix_cache", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    def rss(self) -> int:
        if self.process is None:
            return 0
        total = 0
        for p in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a child that has just ended
                total += p.memory_info().rss
        return total


@dataclass
class Answer:
    length: int
    system: str
    route: str
    seconds: float
    tokens: int
    prompt_tokens: int
    rounds: int
    text: str
    computed: dict[str, float] = field(default_factory=dict)
    """Per server: prompt tokens it computed during the answer."""
    cached: dict[str, float] = field(default_factory=dict)
    peak_gb: dict[str, float] = field(default_factory=dict)


class PeakMemory:
    """Each server's peak RSS while the block runs."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.servers = servers
        self.peak = dict.fromkeys(servers, 0)
        self._stop = threading.Event()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            for label, server in self.servers.items():
                self.peak[label] = max(self.peak[label], server.rss())

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def answer(
    members: list[Member],
    servers: dict[str, Server],
    messages: list[dict[str, str]],
    prompt_tokens: int,
    args: argparse.Namespace,
    length: int,
    route: str,
) -> Answer:
    for server in servers.values():
        server.reset()
    before = {label: s.prompt_tokens() for label, s in servers.items()}
    llm = SpecEMChatModel(
        members=members, window=args.window, max_tokens=args.max_tokens, seed=args.seed
    )
    with PeakMemory(servers) as memory:
        start = time.perf_counter()
        message = await llm.ainvoke(messages)
        seconds = time.perf_counter() - start
    meta = message.response_metadata["specem"]
    after = {label: s.prompt_tokens() for label, s in servers.items()}
    system = members[0].label if len(members) == 1 else "ensemble"
    delta = {
        label: {k: after[label].get(k, 0) - before[label].get(k, 0) for k in after[label]}
        for label in servers
    }
    return Answer(
        length=length,
        system=system,
        route=route,
        seconds=seconds,
        tokens=int(meta["answer_tokens"]),
        prompt_tokens=prompt_tokens,
        rounds=len(meta["segments"]),
        text=str(message.content),
        computed={k: v.get("local_compute", 0) for k, v in delta.items()},
        cached={k: v.get("local_cache_hit", 0) for k, v in delta.items()},
        peak_gb={k: round(v / 2**30, 2) for k, v in memory.peak.items() if v},
    )


def set_route(members: list[Member], route: str, found: dict[str, tuple[str, int | None]]) -> None:
    """Every vLLM member scores on ``route``, never another; ``auto``: as it found at its
    first check (switching to re-reading in the rounds where that computes fewer tokens)."""
    for member in members:
        backend = loaded_backend(member)
        if isinstance(backend, VLLMBackend):
            learnt, block = found[member.label]
            backend.route = learnt if route == "auto" else route  # type: ignore[assignment]
            backend.block = block if route == "auto" else None


def given_members(args: argparse.Namespace) -> list[Member]:
    """The members, each server request allowed ``--request-timeout`` seconds (today's
    route needs more than the default 60 at 6,000 tokens on a CPU)."""
    update = {"request_timeout": args.request_timeout}
    return [m.model_copy(update=update) for m in member_list(args.members)]


async def run(args: argparse.Namespace) -> list[Answer]:
    members = given_members(args)
    found: dict[str, tuple[str, int | None]] = {}
    for member in members:
        backend = loaded_backend(member)
        await backend.ready()  # type: ignore[attr-defined]
        found[member.label] = (getattr(backend, "route", ""), getattr(backend, "block", None))
    servers = {m.label: Server.of(m) for m in members if m.remote}
    for label, server in servers.items():
        print(
            f"{label}: route {found[label][0] or '-'}, block size {server.block_size}, "
            f"reset {'yes' if server.dev else 'no (each answer starts with its own word)'}"
        )
    answers: list[Answer] = []
    for length in args.lengths:
        for member in [None, *members]:  # None: the ensemble, once per route
            for route in args.routes if member is None else ["auto"]:
                n = len(answers)
                lead = "" if all(s.dev for s in servers.values()) else f"Request {n}. "
                messages, tokens = await rag_messages(members[0], length, lead)
                who = members if member is None else [member]
                set_route(members, route, found)
                answers.append(await answer(who, servers, messages, tokens, args, length, route))
                print(json.dumps(asdict(answers[-1]) | {"text": answers[-1].text[:60]}), flush=True)
        set_route(members, "auto", found)
    return answers


@dataclass
class Scored:
    length: int
    member: str
    route: str
    seconds: float
    """Median of ``--repeats``."""
    tokens: int
    """The candidate's tokens."""
    computed: float | None
    """Prompt tokens the server computed for one scoring (None: it does not say)."""


async def scoring(args: argparse.Namespace) -> list[Scored]:
    found: list[Scored] = []
    for member in given_members(args):
        backend = loaded_backend(member)
        await backend.ready()  # type: ignore[attr-defined]
        server = Server.of(member)
        routes = args.routes if isinstance(backend, VLLMBackend) else [""]
        for length in args.lengths:
            messages, tokens = await rag_messages(member, length)
            session = await backend.open(messages)  # type: ignore[arg-type]
            draft = await session.draft(10, Sampling(temperature=0.0), seed=0)
            candidate = [Segment(draft.text)]
            found_route = getattr(backend, "route", "")
            for route in routes:
                if route:  # the route as set, never switched (the measurement is per route)
                    backend.route = found_route if route == "auto" else route  # type: ignore[attr-defined]
                    backend.block = None  # type: ignore[attr-defined]
                times, computed = [], []
                for _ in range(args.repeats):
                    before = server.prompt_tokens()
                    start = time.perf_counter()
                    [score] = await session.score(candidate, "mean_logprob")
                    times.append(time.perf_counter() - start)
                    after = server.prompt_tokens()
                    if after:
                        computed.append(after["local_compute"] - before["local_compute"])
                seconds = statistics.median(times)
                spent = statistics.median(computed) if computed else None
                named = found_route if route == "auto" else route
                found.append(Scored(tokens, member.label, named, seconds, score.tokens, spent))
                print(json.dumps(asdict(found[-1])), flush=True)
            await session.aclose()
    return found


def scoring_table(found: list[Scored]) -> str:
    rows = [
        "| member | prompt tokens | route | s to score one candidate | candidate tokens "
        "| prompt tokens computed |",
        "|---|---|---|---|---|---|",
    ]
    for f in found:
        computed = "" if f.computed is None else f"{int(f.computed):,}"
        rows.append(
            f"| {f.member} | {f.length:,} | {f.route} | {f.seconds:.2f} | {f.tokens} | {computed} |"
        )
    return "\n".join(rows) + "\n"


def table(answers: list[Answer], members: list[str]) -> str:
    rows = [
        "| prompt tokens | system | route | s an answer | answer tokens | rounds | overhead ratio "
        "| prompt tokens computed / read from cache, per server | peak GB, per server "
        "| same answer as auto |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for length in sorted({a.length for a in answers}):
        here = [a for a in answers if a.length == length]
        alone = {a.system: a.seconds / max(a.tokens, 1) for a in here if a.system != "ensemble"}
        auto = next((a.text for a in here if a.system == "ensemble" and a.route == "auto"), None)
        for a in here:
            ratio = ""
            if a.system == "ensemble" and len(alone) == len(members):
                ratio = f"{a.seconds / max(a.tokens, 1) / sum(alone.values()):.2f}"
            tokens = ", ".join(f"{int(a.computed[k]):,} / {int(a.cached[k]):,}" for k in a.computed)
            peaks = ", ".join(f"{v:.2f}" for v in a.peak_gb.values())
            same = "" if a.system != "ensemble" else ("yes" if a.text == auto else "no")
            rows.append(
                f"| {a.prompt_tokens:,} | {a.system} | {a.route if a.system == 'ensemble' else ''} "
                f"| {a.seconds:.1f} | {a.tokens} | {a.rounds} | {ratio} | {tokens} | {peaks} "
                f"| {same} |"
            )
    return "\n".join(rows) + "\n"


def cost_table(answers: list[Answer]) -> str:
    """Per prompt length: each system's seconds a round, and the prompt tokens the busiest
    server computed a round beyond the prompt's first reading; and what one computed token
    costs there, from the two ensemble routes that differ most in tokens computed (same
    rounds, same answers)."""
    rows = [
        "| prompt tokens | system | route | s a round | prompt tokens computed a round, "
        "after the prompt | ms a computed token |",
        "|---|---|---|---|---|---|",
    ]
    for length in sorted({a.length for a in answers}):
        here = [a for a in answers if a.length == length]
        per = {
            id(a): (a.seconds / a.rounds, (max(a.computed.values()) - a.prompt_tokens) / a.rounds)
            for a in here
        }
        ensembles = sorted((a for a in here if a.system == "ensemble"), key=lambda a: per[id(a)][1])
        marginal = ""
        if len(ensembles) > 1:
            (s0, c0), (s1, c1) = per[id(ensembles[0])], per[id(ensembles[-1])]
            marginal = f"{1000 * (s1 - s0) / (c1 - c0):.2f}" if c1 > c0 else ""
        for a in here:
            seconds, computed = per[id(a)]
            route = a.route if a.system == "ensemble" else ""
            rows.append(
                f"| {a.prompt_tokens:,} | {a.system} | {route} | {seconds:.2f} | {computed:,.0f} "
                f"| {marginal if a is ensembles[-1] else ''} |"
            )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "-m",
        "--member",
        action="append",
        default=[],
        dest="members",
        type=lambda s: json.loads(s) if s.startswith("{") else s,
        help="a member spec, or a member's JSON",
    )
    parser.add_argument(
        "--lengths", default="200,2000,6000", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--routes", default="prompt_logprobs,auto", type=lambda s: s.split(","))
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--request-timeout", type=float, default=900)
    parser.add_argument("--scoring", action="store_true", help="time one scoring per route")
    parser.add_argument("--repeats", type=int, default=3, help="with --scoring")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tables-from", type=Path, help="write OUT's tables from a run's JSON")
    args = parser.parse_args()
    if args.tables_from:
        record = json.loads(args.tables_from.read_text())
        answers = [Answer(**a) for a in record["answers"]]
        labels = [m.label for m in member_list(record["command"]["members"])]
        write_tables(args.out or args.tables_from.with_suffix(""), answers, labels)
        return
    if not args.members:
        parser.error("give the members (-m)")
    if args.scoring:
        found = asyncio.run(scoring(args))
        print(scoring_table(found))
        if args.out:
            save(args.out, args, scored=[asdict(f) for f in found])
            args.out.with_suffix(".md").write_text(scoring_table(found))
        return
    answers = asyncio.run(run(args))
    labels = [m.label for m in member_list(args.members)]
    print(table(answers, labels))
    print(cost_table(answers))
    if args.out:
        save(args.out, args, answers=[asdict(a) for a in answers])
        write_tables(args.out, answers, labels)


def save(out: Path, args: argparse.Namespace, **found: object) -> None:
    """``OUT.json``: the command's settings and what it found."""
    out.parent.mkdir(parents=True, exist_ok=True)
    command = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    out.with_suffix(".json").write_text(json.dumps({"command": command, **found}, indent=1) + "\n")


def write_tables(out: Path, answers: list[Answer], labels: list[str]) -> None:
    """``OUT.md``, the answers' table, and ``OUT-rounds.md``, the rounds' costs."""
    out.with_suffix(".md").write_text(table(answers, labels))
    out.with_name(out.name + "-rounds.md").write_text(cost_table(answers))


if __name__ == "__main__":
    main()
