"""``specem serve``: this package's command, which the core's ``specem`` finds by its entry
point (group ``specem_chain.commands``)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from specem_chain import Member, RequestSettings, models
from specem_chain.cli_options import (
    chosen_feedback,
    chosen_members,
    err,
    fail,
    quiet_transformers,
    with_settings,
)
from specem_chain.errors import SpecEMError
from specem_chain.members import ensemble_name
from specem_chain.request import warm_up

from .drain import CUT_S, DRAIN_S
from .keys import ENVIRONMENT, ApiKeys, KeysError
from .limits import Limits

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""Where prometheus-client's multiprocess mode keeps each worker's values (set here before
the workers start; the metrics module is imported by them, not here)."""


@with_settings(aliases={"answer_timeout": ["--request-timeout"]})
@with_settings(model=Limits, into="limits")
def serve(
    member: Annotated[
        list[str] | None,
        typer.Option(
            "--member",
            "-m",
            help="A member, as for chat. Repeatable. Default: the embedded default ensemble.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    batching: Annotated[
        bool,
        typer.Option(
            help="Read concurrent requests in one batch on llama.cpp members (faster under "
            "load; an answer may differ slightly from the same answer made alone)."
        ),
    ] = True,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes behind the one port, each with its own copy of the "
            "in-process members (members on servers are shared); more workers answer more "
            "requests at once where the members' compute allows.",
        ),
    ] = 1,
    feedback_path: Annotated[
        str | None,
        typer.Option(
            "--feedback",
            metavar="PATH|URL",
            help="Task-level feedback: every answer starts from its task's weights kept in "
            "this feedback store and carries its own over: a SQLite file (made if it does not "
            "exist), which the workers share, or a postgresql:// URL, which every replica "
            "shares (the password from PGPASSWORD or the URL). It survives restarts.",
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="The task answers count toward in the --feedback store, unless a request "
            "names its own in metadata.task. Default: default."
        ),
    ] = None,
    drain_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            help="On SIGTERM, drain for at most this long before exiting: /ready answers 503 "
            "and new requests get 503 with Retry-After, while the answers in flight (streamed "
            "ones too) finish; any still running at the end is cut with an error its client "
            "reads. Keep it under Kubernetes' terminationGracePeriodSeconds (30 by default).",
        ),
    ] = DRAIN_S,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            envvar=ENVIRONMENT,
            show_envvar=True,
            help="A key every request under /v1/ must send (Authorization: Bearer KEY; the "
            "OpenAI client's api_key). Repeatable. Without any key the server answers anyone "
            "who reaches its port.",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            help="A file of keys, one a line (# starts a comment), read again on SIGHUP: add "
            "or revoke a key without a restart.",
            dir_okay=False,
        ),
    ] = None,
    metrics_need_key: Annotated[
        bool,
        typer.Option(help="/metrics needs a key too (/health and /ready never do)."),
    ] = False,
    *,
    settings: RequestSettings,
    limits: Limits,
) -> None:
    """Serve the ensemble over the OpenAI chat API: POST /v1/chat/completions. The settings
    are every request's defaults; a request's max_tokens, temperature, seed,
    repeat_penalty and loop_penalty override them. GET /health is the liveness probe,
    GET /ready the readiness probe (every member, and 503 while fewer than min_members can
    serve or the server drains), GET /metrics the Prometheus metrics (every worker's)."""
    quiet_transformers()
    try:
        keys = ApiKeys(api_key or (), api_key_file)
    except KeysError as error:
        raise fail(f"--api-key{'-file' if api_key_file else ''}: {error}") from None
    if metrics_need_key and not keys.required:
        raise fail("--metrics-need-key: give --api-key or --api-key-file, the keys it needs")
    feedback = chosen_feedback(feedback_path, task, json_file=False)
    members = chosen_members(member)
    try:
        if batching:
            members = [
                m.model_copy(update={"batching": True})
                if not m.remote and models.runs_on(m) == "llamacpp"
                else m
                for m in members
            ]
        # every member checked now, not in the first request: loaded here with one worker,
        # fetched (and servers asked) here with several, each of which loads its own
        asyncio.run(warm_up(members) if workers == 1 else checked(members))
    except (SpecEMError, ValueError) as error:
        raise fail(str(error)) from None
    import uvicorn

    from .app import SERVED, create_app, serving

    # the drain ends the server itself; uvicorn's own wait after it is only a backstop
    stop = {"host": host, "port": port, "timeout_graceful_shutdown": int(CUT_S) + 2}

    err.print(f"serving {ensemble_name(members)} at http://{host}:{port}/v1")
    if feedback is not None:
        err.print(f"feedback: {feedback.where}, task {feedback.task} ({feedback.answers} answers)")
    if keys.required:
        needing = "/v1/ and /metrics need" if metrics_need_key else "/v1/ needs"
        err.print(f"API keys: {len(keys)}; {needing} one")
    elif not loopback(host):
        err.print(
            f"warning: no API key, and --host {host} listens beyond this machine: anyone who "
            f"reaches port {port} can use every member; give --api-key or --api-key-file",
            style="yellow",
            soft_wrap=True,  # one line, whatever the terminal's width
        )
    guarding: dict[str, Any] = {
        "limits": limits, "keys": keys, "metrics_need_key": metrics_need_key,
    }  # fmt: skip
    if workers == 1:
        app = create_app(members, settings, feedback=feedback, drain_s=drain_seconds, **guarding)
        uvicorn.run(app, **stop)
        return
    os.environ[SERVED] = serving(members, settings, feedback, drain_seconds, **guarding)
    if feedback is not None:
        feedback.close()  # each worker opens the store itself
    if os.environ.get(MULTIPROC_DIR):  # the operator's own directory
        supervise(workers, stop)
        return
    # the workers' metrics, added up at /metrics: this server's alone, gone at its exit
    with tempfile.TemporaryDirectory(prefix="specem-metrics-") as shared:
        os.environ[MULTIPROC_DIR] = shared
        supervise(workers, stop)


def loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def supervise(workers: int, options: dict[str, Any]) -> None:
    """Run the workers under uvicorn's supervisor, as ``uvicorn.run`` does, but with a
    SIGHUP passed on to every worker (each reads its key file again) instead of
    uvicorn's restart of them all (which would load every in-process member again)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        def handle_hup(self) -> None:
            for process in self.processes:
                if process.pid is not None:
                    os.kill(process.pid, signal.SIGHUP)

    config = uvicorn.Config(
        "specem_openai_server.app:served", factory=True, workers=workers, **options
    )
    Supervisor(config, sockets=[config.bind_socket()]).run()


async def checked(members: Sequence[Member]) -> None:
    """Fetch the built-in members' files and check the servers, loading no model here."""
    await asyncio.gather(
        *(
            warm_up([m]) if m.remote else asyncio.to_thread(models.resolve, m, progress=False)
            for m in members
        )
    )
