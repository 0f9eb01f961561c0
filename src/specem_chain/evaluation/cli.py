"""``specem eval``: the command. Heavy imports wait until it runs, so the rest of the
command line works without the eval extra."""

from __future__ import annotations

import asyncio
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..cli_options import err, fail, quiet_transformers, with_settings
from ..members import BackendName, Member
from ..models import DEFAULT_MEMBERS, builtin, runs_on
from ..request import RequestSettings

EVERY_SYSTEM = ("window", "max_tokens", "repeat_penalty", "temperature")
"""Request settings that ``specem eval`` sets for every system (a variant may still set the
sampling ones itself)."""


class TaskName(str, Enum):
    gsm8k = "gsm8k"
    instructions = "instructions"
    reference = "reference"


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def _skipped(examples: list, skip: int) -> list:
    if skip and skip >= len(examples):
        raise ValueError(f"--skip {skip} leaves none of the {len(examples)} examples")
    return examples[skip:]


@with_settings(EVERY_SYSTEM)
def eval_command(
    task: Annotated[TaskName, typer.Option(help="How answers are scored.")],
    data: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="The examples, one JSON a line.")
    ],
    members: Annotated[
        list[str] | None,
        typer.Option(
            help="Members, comma-separated or repeated (built-in names, folders, .gguf files, "
            "hub ids, servers). Default: the embedded default ensemble."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Use the first N examples.")] = None,
    skip: Annotated[
        int,
        typer.Option(
            min=0,
            help="Leave out the first N of those, to split a run over processes: --limit 100 "
            "in one, --skip 100 --limit 200 in another (each example keeps its seed).",
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(min=0, help="Base seed; example i uses seed + i.")] = 0,
    systems: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated systems: member:<name>, specem, specem-no-feedback, "
            "specem-paper, specem-logit, rank, mbr, vote (gsm8k), or a variant with its "
            "settings in brackets: 'specem[gate=0.5,feedback=task]'. Default: all."
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", file_okay=False, help="Results folder. Default: eval/<task>."),
    ] = None,
    backend: Annotated[
        BackendName,
        typer.Option(
            help="Where local members run: auto (llama.cpp for built-in and .gguf members "
            "on a CPU when the llamacpp extra is installed, about 3x faster there; otherwise "
            "transformers), llamacpp or transformers."
        ),
    ] = "auto",
    order: Annotated[
        str,
        typer.Option(
            help="The order the examples run in: 'stored' (the file's) or 'shuffle:N' (a "
            "permutation seeded by N). It matters to systems with feedback=task; every "
            "example keeps its own sampling seed."
        ),
    ] = "stored",
    choose: Annotated[
        bool,
        typer.Option(
            "--choose",
            help="Run each of the --members alone and choose among them: the anchor (the "
            "best score), the members close enough to help it (at least 90% of its score) "
            "and the ensemble to run; writes choice.json and choice.md.",
        ),
    ] = False,
    *,
    settings: RequestSettings,
) -> None:
    """Compare the ensemble with its members and baselines on a task; resumable. The
    window, answer length, repetition penalty and temperature are every system's (a
    variant may still set its own sampling). With --choose, choose which members to
    ensemble from each member alone."""
    # one function: the command's steps in order (check, build, run, summarise), each a call
    specs = _split(members)
    if choose:
        _check_choose(systems, specs)
    try:
        from ..errors import SpecEMError
        from . import choose as choosing
        from . import run, summary
        from .systems import (
            Settings,
            build_systems,
            member_system_name,
            recipes,
            split_names,
            system_names,
        )
        from .tasks import TASKS
    except ImportError as error:
        raise fail(
            f"eval needs the eval extra ({error}): pip install 'specem-chain[eval]'"
        ) from None

    evaluation = TASKS[task.value]
    out_dir = out_dir or Path("eval") / task.value
    try:
        ensemble = eval_members(specs, backend, settings)
        examples = run.ordered(_skipped(evaluation.load(data, limit), skip), order)
        shared = Settings(seed=seed, max_tokens=settings.max_tokens, window=settings.window)
        members_alone = [member_system_name(m) for m in ensemble]
        if choose:
            names = members_alone
        else:
            names = split_names(systems or "") or system_names(ensemble, evaluation)
        chosen = build_systems(names, ensemble, evaluation, shared)
        solo = build_systems(members_alone, ensemble, evaluation, shared)
        manifest = _manifest(evaluation.name, data, ensemble, seed, settings, order)
        store = run.open_store(out_dir, manifest, recipes(chosen, solo))
    except (SpecEMError, ValueError) as error:  # pydantic's ValidationError too
        raise fail(str(error)) from None

    quiet_transformers()
    try:
        asyncio.run(run.run(evaluation, examples, chosen, solo, store, err))
    except KeyboardInterrupt:
        err.print(f"interrupted: run the same command again to resume from {out_dir}")
        raise typer.Exit(130) from None
    except SpecEMError as error:
        raise fail(str(error)) from None

    members_line = "members: " + ", ".join(m.label for m in ensemble)
    title = f"{evaluation.name}, {len(examples)} examples\n{members_line}"
    scores = summary.score_answers(evaluation, store, names, examples)
    result = summary.summarise(evaluation, scores, seed)
    comparison = summary.compare_with_best_member(evaluation, scores, result, members_alone)
    cost = summary.costs(store.records, scores)
    summary.write(result, out_dir, title, comparison, cost)
    if choose:
        options = rerun_options(evaluation.name, data, limit, skip, seed, order, backend, settings)
        spelled = {m.label: spec for m, spec in zip(ensemble, specs)}
        options += ["--out", f"{out_dir}-ensemble"]
        document = choosing.from_run(evaluation, scores, result, cost, spelled, options)
        typer.echo(choosing.write(document, out_dir, title), nl=False)
        err.print(f"results in {out_dir}: choice.md, choice.json and the summary's files")
        return
    typer.echo(summary.markdown(result, comparison, cost), nl=False)
    err.print(f"results in {out_dir}: summary.md, {{summary,metrics,paired,cost}}.json, chart.png")


def _check_choose(systems: str | None, specs: list[str]) -> None:
    """--choose's own errors, before any member runs."""
    if systems is not None:
        raise fail("--choose runs every member alone and chooses among them: leave out --systems")
    if len(specs) < 2:
        raise fail(
            f"--choose chooses among members: name two or more with --members (got {len(specs)})"
        )


def _manifest(
    task: str,
    data: Path,
    ensemble: list[Member],
    seed: int,
    settings: RequestSettings,
    order: str,
) -> dict[str, object]:
    """What a run's answers depend on, which a resumed run must match (``run.json``)."""
    manifest: dict[str, object] = {
        "task": task,
        "data": data.name,
        "members": [m.label for m in ensemble],
        "seed": seed,
        "max_tokens": settings.max_tokens,
        "window": settings.window,
        "backend": ",".join(sorted({m.backend for m in ensemble if m.kind == "local"})),
    }
    if order != "stored":
        manifest["order"] = order
    return manifest


def rerun_options(
    task: str,
    data: Path,
    limit: int | None,
    skip: int,
    seed: int,
    order: str,
    backend: BackendName,
    settings: RequestSettings,
) -> list[str]:
    """The options that give another ``specem eval`` this run's examples and settings
    (those left at their defaults left out)."""
    given: dict[str, object] = {
        "--limit": limit,
        "--skip": skip or None,
        "--seed": seed or None,
        "--order": None if order == "stored" else order,
        "--backend": None if backend == "auto" else backend,
    }
    defaults = RequestSettings()
    for name in EVERY_SYSTEM:
        if (value := getattr(settings, name)) != getattr(defaults, name):
            given[f"--{name.replace('_', '-')}"] = value
    options = ["--task", task, "--data", str(data)]
    for option, value in given.items():
        if value is not None:
            options += [option, str(value)]
    return options


def replay_command(
    folder: Annotated[
        Path, typer.Argument(exists=True, file_okay=False, help="A specem eval results folder.")
    ],
    system: Annotated[str, typer.Option(help="The recorded system to replay.")] = "specem",
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="A policy to replay (paper, pool, peer, anchor: the first member anchoring, "
            "on the rounds everyone verified). Repeatable. Default: all."
        ),
    ] = None,
    learning_rate: Annotated[float, typer.Option(help="The policies' learning rate.")] = 1.0,
) -> None:
    """Replay policies on a run's recorded rounds: how often each makes the recorded
    choice, and whose drafts it picks. At no model cost."""
    from ..engine import EngineConfig
    from ..engine.config import POLICIES
    from . import replay

    try:
        answers = replay.load(folder, system)
        policies = {
            name: EngineConfig(policy=name, learning_rate=learning_rate).round_policy()  # type: ignore[arg-type]
            for name in policy or POLICIES
        }
    except ValueError as error:
        raise fail(str(error)) from None
    rows = {name: replay.replay(answers, p) for name, p in policies.items()}
    members = answers[0].members
    typer.echo(f"{system}: {len(answers)} answers\n")
    typer.echo(replay.table(rows, members), nl=False)


def eval_members(specs: list[str], backend: BackendName, tuning: RequestSettings) -> list[Member]:
    """The members (none: the embedded default ensemble), built-in ones under their
    canonical names, local ones on ``backend`` (``auto`` resolved, so that the run records
    where they ran), with the sampling settings ``tuning`` gives as every one's."""
    members = [Member(source=s, name=b.name if (b := builtin(s)) else None) for s in specs]
    members = members or list(DEFAULT_MEMBERS)
    return tuning.tuned(
        [
            m.model_copy(update={"backend": runs_on(m.model_copy(update={"backend": backend}))})
            if m.kind == "local"
            else m
            for m in members
        ]
    )
