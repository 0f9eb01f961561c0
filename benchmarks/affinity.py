r"""Answers that stay on one replica: one member served by two vLLM replicas behind a real
proxy (nginx), at a RAG prompt of about 2,000 tokens, answered with the proxy sending each
request to the next replica (``round-robin``: the member sends no session header) and by the
answer's session header (``session``: ``hash $http_x_session_id consistent``).

    ./run python benchmarks/affinity.py --out docs/benchmarks/affinity

starts two vLLM CPU replicas of SmolLM2 (``benchmarks/vllm-cpu-server``, one core each) and
nginx (``apt-get install nginx``), and stops them at the end; ``--replica URL`` (twice) uses
running replicas instead, started with ``VLLM_SERVER_DEV_MODE=1`` as that script does, so
that every answer starts from empty prefix caches (``POST /reset_prefix_cache``).

The member answers alone with ``preset="rerank"``: each round it drafts two candidates and
scores them itself, so every round sends drafting and scoring requests, all of which the
header keeps on one replica. Each seed is answered both ways (which way first alternates),
and for each answer it reports the prompt tokens the replicas computed and read from their
caches (their own ``vllm:prompt_tokens_by_source_total``, before and after), the requests
each replica took (nginx's access log), the answer's time, and whether both ways gave the
same answer. Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rag_context import Server, rag_messages, save

from specem_chain import Member, RequestSettings, open_request
from specem_chain.backends import loaded_backend

VLLM_CPU_SERVER = Path(__file__).with_name("vllm-cpu-server")
ROUTINGS = ("round-robin", "session")
STARTUP_S = 900
"""How long two vLLM CPU replicas may take to start on two busy cores."""

NGINX_CONF = """\
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format routed '$msec $http_x_session_id $upstream_addr $request_uri';
    access_log {folder}/access.log routed;
    client_max_body_size 0;  # a scoring request lists every prefix's ids
    proxy_request_buffering off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    upstream round_robin {{
{servers}        keepalive 16;
    }}
    upstream session {{
        hash $http_x_session_id consistent;
{servers}        keepalive 16;
    }}
{proxies}}}
"""
PROXY = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 900s;
            proxy_buffering off;
        }}
    }}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not answer {url} within {seconds:g} s")
        time.sleep(1)


@contextmanager
def replicas(given: list[str]) -> Iterator[list[str]]:
    """The replicas' URLs: those given, or two started here (one core each) and killed at
    the end."""
    if given:
        yield given
        return
    ports = [free_port(), free_port()]
    try:
        for core, port in enumerate(ports):
            subprocess.run([str(VLLM_CPU_SERVER), "start", str(port), str(core)], check=True)
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url in urls:
            wait_until_up(f"{url}/v1/models", STARTUP_S, f"the replica at {url}")
        yield urls
    finally:
        for port in ports:
            subprocess.run([str(VLLM_CPU_SERVER), "kill", str(port)], check=False)


@dataclass(frozen=True)
class Proxy:
    """nginx in front of the replicas: a port per way of routing, and its access log."""

    ports: dict[str, int]
    log: Path

    def url(self, routing: str) -> str:
        return f"http://127.0.0.1:{self.ports[routing]}"

    def upstreams(self) -> list[str]:
        """Each request's replica (``host:port``) so far, in order."""
        return [line.split()[2] for line in self.log.read_text().splitlines() if line]


@contextmanager
def nginx(urls: list[str]) -> Iterator[Proxy]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise SystemExit("nginx is not installed: apt-get install -y nginx")
    with tempfile.TemporaryDirectory(prefix="specem-affinity-") as folder:
        ports = {routing: free_port() for routing in ROUTINGS}
        servers = "".join(f"        server {url.split('://', 1)[1]};\n" for url in urls)
        proxies = "".join(
            PROXY.format(port=port, upstream=routing.replace("-", "_"))
            for routing, port in ports.items()
        )
        conf = Path(folder) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(folder=folder, servers=servers, proxies=proxies))
        (Path(folder) / "access.log").touch()
        command = [binary, "-p", folder, "-c", str(conf), "-g", "daemon off;"]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        try:
            proxy = Proxy(ports, Path(folder) / "access.log")
            for routing in ROUTINGS:
                wait_until_up(f"{proxy.url(routing)}/v1/models", 30, "nginx")
            yield proxy
        finally:
            process.terminate()
            process.wait(timeout=30)
            said = (Path(folder) / "error.log").read_text()
            if "[error]" in said or "[crit]" in said or "[emerg]" in said:
                print(f"nginx's error log:\n{said[-3000:]}", file=sys.stderr)


@dataclass
class Row:
    routing: str
    seed: int
    seconds: float
    prompt_tokens: int
    """The prompt's length in the member's tokens."""
    answer_tokens: int
    rounds: int
    computed: list[float]
    """Per replica: prompt tokens it computed for the answer."""
    cached: list[float]
    """Per replica: prompt tokens it read from its prefix cache."""
    requests: list[int]
    """Per replica: the answer's requests it took."""
    text: str

    @property
    def contexts(self) -> float:
        """Prompt tokens computed over the prompt's length: about how many times the
        replicas read the whole context (a cached scoring's partial blocks count too)."""
        return sum(self.computed) / self.prompt_tokens


async def answer(
    member: Member,
    routing: str,
    seed: int,
    messages: list[dict[str, str]],
    prompt_tokens: int,
    servers: list[Server],
    proxy: Proxy,
    args: argparse.Namespace,
) -> Row:
    for server in servers:
        if not server.reset():
            raise SystemExit(
                f"{server.url} does not reset its prefix cache: start it with "
                "VLLM_SERVER_DEV_MODE=1 (benchmarks/vllm-cpu-server does)"
            )
    before = [s.prompt_tokens() for s in servers]
    seen = len(proxy.upstreams())
    settings = RequestSettings(
        preset="rerank", max_tokens=args.max_tokens, window=args.window, seed=seed
    )
    start = time.perf_counter()
    async with open_request([member], messages, settings) as run:  # type: ignore[arg-type]
        async for _ in run:
            pass
    seconds = time.perf_counter() - start
    after = [s.prompt_tokens() for s in servers]
    upstreams = proxy.upstreams()[seen:]
    return Row(
        routing=routing,
        seed=seed,
        seconds=round(seconds, 2),
        prompt_tokens=prompt_tokens,
        answer_tokens=run.answer.usage()["answer_tokens"],
        rounds=len(run.answer.rounds),
        computed=[
            a.get("local_compute", 0) - b.get("local_compute", 0) for a, b in zip(after, before)
        ],
        cached=[
            a.get("local_cache_hit", 0) - b.get("local_cache_hit", 0) for a, b in zip(after, before)
        ],
        requests=[upstreams.count(s.url.split("://", 1)[1]) for s in servers],
        text=run.answer.text,
    )


async def run(args: argparse.Namespace, urls: list[str], proxy: Proxy) -> list[Row]:
    servers = [Server(url) for url in urls]
    members = {
        routing: Member.vllm(
            proxy.url(routing),
            name="smollm2",
            request_timeout=args.request_timeout,
            session_header=None if routing == "round-robin" else "X-Session-ID",
        )
        for routing in ROUTINGS
    }
    prompts = {}
    for routing, member in members.items():
        await loaded_backend(member).ready()  # type: ignore[attr-defined]
        prompts[routing] = await rag_messages(member, args.tokens)
    rows: list[Row] = []
    for seed in range(args.seeds):
        order = ROUTINGS if seed % 2 == 0 else ROUTINGS[::-1]
        for routing in order:
            messages, tokens = prompts[routing]
            row = await answer(
                members[routing], routing, seed, messages, tokens, servers, proxy, args
            )
            rows.append(row)
            print(json.dumps(asdict(row) | {"text": row.text[:60]}), flush=True)
    return rows


def table(rows: list[Row]) -> str:
    """Each answer, then each way's medians, with whether the two ways answered alike."""
    texts = {(r.routing, r.seed): r.text for r in rows}
    lines = [
        "| routing | seed | prompt tokens | computed (per replica) | computed ÷ prompt | "
        "cached | requests (per replica) | rounds | answer tokens | seconds | same answer |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        same = texts.get(("round-robin", r.seed)) == texts.get(("session", r.seed))
        lines.append(
            f"| {r.routing} | {r.seed} | {r.prompt_tokens} | {sum(r.computed):.0f} "
            f"({' + '.join(f'{c:.0f}' for c in r.computed)}) | {r.contexts:.2f} | "
            f"{sum(r.cached):.0f} | {' + '.join(map(str, r.requests))} | {r.rounds} | "
            f"{r.answer_tokens} | {r.seconds:.1f} | {'yes' if same else 'no'} |"
        )
    lines += [
        "",
        "| routing | answers | median prompt tokens computed | median computed ÷ prompt | "
        "median seconds |",
        "|---|---|---|---|---|",
    ]
    for routing in ROUTINGS:
        mine = [r for r in rows if r.routing == routing]
        if mine:
            lines.append(
                f"| {routing} | {len(mine)} | "
                f"{statistics.median(sum(r.computed) for r in mine):.0f} | "
                f"{statistics.median(r.contexts for r in mine):.2f} | "
                f"{statistics.median(r.seconds for r in mine):.1f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--replica", action="append", default=[], help="a running replica's URL (give two)"
    )
    parser.add_argument("--tokens", type=int, default=2000, help="the RAG prompt's length")
    parser.add_argument("--seeds", type=int, default=3, help="answers each way")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--request-timeout", type=float, default=900)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if len(args.replica) not in (0, 2):
        parser.error("give --replica twice, or not at all (two are started here)")
    with replicas(args.replica) as urls, nginx(urls) as proxy:
        rows = asyncio.run(run(args, urls, proxy))
    print(table(rows))
    if args.out:
        save(args.out, args, rows=[asdict(r) | {"contexts": r.contexts} for r in rows])
        args.out.with_suffix(".md").write_text(table(rows))


if __name__ == "__main__":
    main()
