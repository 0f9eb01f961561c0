"""The ``specem`` command: chat with an ensemble, and manage the built-in members.

Commands that other packages add (``specem serve``, from the OpenAI-server adapter) are
found by their entry points in the :data:`PLUGINS` group, so this package never imports
them.
"""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import models
from .cli_options import (
    chosen_feedback,
    chosen_members,
    err,
    fail,
    quiet_transformers,
    with_settings,
)
from .errors import SpecEMError
from .evaluation import cli as evaluation_cli
from .feedback import Feedback
from .members import BackendName, Member
from .report import report
from .request import Answer, RequestSettings, open_request

app = typer.Typer(
    help="SpecEM: several LLMs write one answer together, one segment at a time.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="The built-in members, which install from the package index.")
app.add_typer(models_app, name="models")
app.command("eval")(evaluation_cli.eval_command)
app.command("replay")(evaluation_cli.replay_command)

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")
out = Console(highlight=False)

PLUGINS = "specem_chain.commands"
"""The entry-point group of commands that other packages add to ``specem``."""
MISSING_PLUGINS = {
    "serve": (
        "Serve the ensemble over the OpenAI chat API (needs the OpenAI-server adapter).",
        "serve needs the OpenAI-server adapter: pip install ./adapters/specem-openai-server",
    ),
}
"""Commands of other packages, and what to install when one is missing."""


@app.command()
@with_settings()
def chat(
    prompt: Annotated[str, typer.Argument(help="The question to answer.")],
    member: Annotated[
        list[str] | None,
        typer.Option(
            "--member",
            "-m",
            help="A member: built-in name, model folder, .gguf file or hub id. Repeatable. "
            "Default: the embedded default ensemble.",
        ),
    ] = None,
    system: Annotated[str | None, typer.Option(help="A system message.")] = None,
    feedback_path: Annotated[
        str | None,
        typer.Option(
            "--feedback",
            metavar="PATH|URL",
            help="Task-level feedback: start from the task's weights kept there (uniform "
            "where there are none yet) and carry this answer's over. A feedback store (a "
            "SQLite file, made if it does not exist, or a postgresql:// URL; the one specem "
            "serve --feedback shares) or, for a path ending in .json, a JSON file saved back "
            "whole. Give the same one to every question of one task.",
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="The task this answer counts toward in the --feedback store. Default: default."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of streaming.")
    ] = False,
    report_path: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Also write an HTML page of the answer's provenance to this path.",
            dir_okay=False,
        ),
    ] = None,
    *,
    settings: RequestSettings,
) -> None:
    """Answer PROMPT with the ensemble, streaming each segment in its member's colour."""
    if not prompt.strip():
        raise fail("the prompt is empty: give a question to answer")
    if report_path and not report_path.parent.is_dir():
        raise fail(f"--report: folder {str(report_path.parent)!r} does not exist")
    feedback = chosen_feedback(feedback_path, task, json_file=True)
    members = chosen_members(member)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    quiet_transformers()
    try:
        answer = asyncio.run(_chat(members, messages, settings, feedback, stream=not as_json))
    except SpecEMError as error:
        raise fail(str(error)) from None
    if feedback_path and feedback is not None:
        if feedback.location is None:  # a JSON file
            try:
                feedback.save(feedback_path)
            except OSError as error:
                raise fail(f"cannot save the feedback: {error}") from None
            err.print(f"feedback: {feedback_path} ({feedback.answers} answers)")
        else:
            err.print(
                f"feedback: {feedback.where}, task {feedback.task} ({feedback.answers} answers)"
            )
    if as_json:
        out.print_json(json.dumps(answer.to_json()))
    else:
        out.print()
        out.print(members_table(answer))
    if report_path:
        try:
            report_path.write_text(report(answer.to_json(), question=prompt), encoding="utf-8")
        except OSError as error:
            raise fail(f"cannot write the report: {error}") from None
        err.print(f"report: {report_path}")


async def _chat(
    members: list[Member],
    messages: list,
    settings: RequestSettings,
    feedback: Feedback | None,
    *,
    stream: bool,
) -> Answer:
    labels = [m.label for m in members]
    colours = dict(zip(labels, COLOURS * len(members)))
    if stream:
        legend = Text.assemble(*((f"{m} ", colours[m]) for m in labels))
        err.print(Text("members: ") + legend)
    async with open_request(members, messages, settings, feedback=feedback) as run:
        async for update in run:
            if stream:
                out.print(Text(update.text, style=colours[update.event.winner]), end="")
    return run.answer


def members_table(answer: Answer) -> Table:
    """Where every member ran, its wins, final weight and tokens."""
    usage = answer.usage()["per_member"]
    table = Table(title=f"finish: {answer.finish_reason}", title_justify="left")
    for column in ("member", "backend", "wins", "weight", "prompt tokens", "drafted tokens"):
        table.add_column(column, justify="left" if column in ("member", "backend") else "right")
    for i, name in enumerate(answer.members):
        table.add_row(
            Text(name, style=COLOURS[i % len(COLOURS)]),
            answer.backends.get(name, ""),
            str(answer.wins[name]),
            f"{answer.weights[name]:.3f}",
            str(usage[name]["input_tokens"]),
            str(usage[name]["output_tokens"]),
        )
    return table


@app.command()
def bench(
    member: Annotated[
        list[str] | None,
        typer.Option("--member", "-m", help="Members; default: the embedded default ensemble."),
    ] = None,
    lengths: Annotated[
        list[int] | None,
        typer.Option(
            "--length",
            help="Answer lengths. Repeatable. Default: 64, 256 and 512; under --concurrency, "
            "each request's limit (default 128).",
        ),
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Runs per length or level.")] = 3,
    reference_repeats: Annotated[
        int, typer.Option(min=1, help="Runs per length of the (slow) reference design.")
    ] = 3,
    reference_from: Annotated[
        Path | None,
        typer.Option(
            help="Take the reference design's figures from an earlier run's speed JSON "
            "(same members; the reference design runs on transformers whatever the backend) "
            "instead of measuring it again."
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            help="Measure under load instead: this many requests at once, e.g. 1,2,4,8; "
            "with and without batching on llama.cpp, interleaved."
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="Under --concurrency, send the requests to this OpenAI-style server "
            "(e.g. specem serve's http://127.0.0.1:8000/v1) with the openai client."
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write speed-BACKEND (load-BACKEND, load-server) .md, .json, .png here."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    backend: Annotated[
        BackendName,
        typer.Option(help="Where the members run (llamacpp needs the llamacpp extra)."),
    ] = "auto",
) -> None:
    """Measure speed against the members alone and against the reference design, or under
    load (--concurrency)."""
    quiet_transformers()
    given = chosen_members(member)
    backend = models.runs_on(given[0].model_copy(update={"backend": backend}))
    members = [m.model_copy(update={"backend": backend}) for m in given]
    if server is not None and concurrency is None:
        raise fail("--server applies to the load benchmark: give --concurrency too")
    try:
        if concurrency is not None:
            name, kind, result = _load(members, _levels(concurrency), lengths, repeats, server)
        else:
            name, kind, result = _speed(
                members, lengths, repeats, reference_repeats, reference_from
            )
    except SpecEMError as error:
        raise fail(str(error)) from None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / name  # the same three files for either benchmark
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        stem.with_suffix(".md").write_text(kind.table(result) + "\n")
        kind.plot(result, stem.with_suffix(".png"))
    if as_json:
        out.print_json(json.dumps(result))
    else:
        out.print(kind.table(result))


def _levels(concurrency: str) -> list[int]:
    try:
        levels = [int(n) for n in concurrency.split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise fail(f"--concurrency takes request counts such as 1,2,4,8, not {concurrency!r}")
    return levels


def _speed(
    members: list[Member],
    lengths: list[int] | None,
    repeats: int,
    reference_repeats: int,
    reference_from: Path | None,
) -> tuple[str, ModuleType, dict]:
    from .benchmark import speed

    lengths = lengths or [64, 256, 512]
    reference = (
        speed.reference_figures(reference_from, members, lengths) if reference_from else None
    )
    result = speed.measure(members, lengths, repeats, reference_repeats, err.log, reference)
    return f"speed-{members[0].backend}", speed, result


def _load(
    members: list[Member],
    levels: list[int],
    lengths: list[int] | None,
    repeats: int,
    server: str | None,
) -> tuple[str, ModuleType, dict]:
    from .benchmark import load

    if lengths is not None and len(lengths) != 1:
        raise fail("--concurrency takes one --length: each request's answer limit")
    max_tokens = lengths[0] if lengths else 128
    if server is not None:
        modes = {"server": load.through_server(server)}
        run = load.measure(modes, levels, max_tokens, repeats, err.log)
        return "load-server", load, asyncio.run(run)
    ensembles = {"unbatched": members}
    if members[0].backend == "llamacpp":  # batching runs on llama.cpp only
        ensembles["batched"] = [m.model_copy(update={"batching": True}) for m in members]
    modes = {mode: load.in_process(ensemble) for mode, ensemble in ensembles.items()}
    run = load.measure(modes, levels, max_tokens, repeats, err.log, members=ensembles)
    return f"load-{members[0].backend}", load, asyncio.run(run)


@models_app.command("list")
def models_list() -> None:
    """Show the built-in members and, per backend, whether the cache holds them."""
    for row in models.list_models():
        held = ", ".join(
            f"{backend}: {'cached' if cached else 'not cached yet'}"
            for backend, cached in row.cached.items()
        )
        out.print(
            Text.assemble(
                (row.name, "bold"),
                f"  (alias {', '.join(row.aliases)})  ",
                ("default" if row.default else "optional", "green" if row.default else ""),
                f" member, {row.licence}; {held}",
            )
        )
        out.print(f"    {row.description}")


@models_app.command("pull")
def models_pull(
    names: Annotated[
        list[str] | None, typer.Argument(help="Built-in names; default: the default ensemble's.")
    ] = None,
    backend: Annotated[
        BackendName,
        typer.Option(
            help="The backend to fetch them for: auto (as a request would), "
            "llamacpp (the GGUF) or transformers (the GGUF converted to a folder)."
        ),
    ] = "auto",
) -> None:
    """Fetch and verify built-in members now, in the form their backend loads, so that
    later runs start at once."""
    quiet_transformers()
    try:
        for name in names or [m.source for m in models.DEFAULT_MEMBERS]:
            models.builtin_model(name)  # a name that is not a built-in one is an error
            member = models.resolve(Member(source=name, backend=backend), progress=True)
            out.print(f"{name} ({member.backend}): {member.source}")
    except (SpecEMError, ValidationError) as error:
        raise fail(str(error)) from None


def add_plugins() -> None:
    """Add the commands that installed packages declare in :data:`PLUGINS`; one that is
    missing (``serve``) says what to install, whatever it is given."""
    found = {entry.name: entry for entry in entry_points(group=PLUGINS)}
    for name, entry in found.items():
        app.command(name)(entry.load())
    for name, (about, install) in MISSING_PLUGINS.items():
        if name not in found:
            extra = {"ignore_unknown_options": True, "allow_extra_args": True}
            app.command(name, help=about, context_settings=extra)(_explaining(install))


def _explaining(install: str):
    def command(ctx: typer.Context) -> None:
        raise fail(install)

    return command


add_plugins()
