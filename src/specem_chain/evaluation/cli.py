"""``specem eval``: the command. Heavy imports wait until it runs, so the rest of the
command line works without the eval extra."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..cli_options import err, fail, option_name, quiet_transformers, with_settings
from ..members import BackendName, Member
from ..models import DEFAULT_MEMBERS, builtin, runs_on
from ..request import RequestSettings

if TYPE_CHECKING:
    from .run import ResultStore
    from .systems import System
    from .tasks import Example, Task

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
    specs = _split(members)
    if choose:
        _check_choose(systems, specs)
    _need_eval_extra()
    out = out_dir or Path("eval") / task.value
    planned = _plan(
        task.value, data, specs, limit, skip, seed, systems, choose, backend, order, settings, out
    )
    _answer(planned)
    if choose:
        options = rerun_options(task.value, data, limit, skip, seed, order, backend, settings)
        _write_choice(planned, specs, [*options, "--out", f"{out}-ensemble"])
    else:
        _write_summary(planned)


@dataclass(frozen=True)
class Planned:
    """A ``specem eval`` run as it stands once checked and built, before any member runs."""

    evaluation: Task
    examples: list[Example]
    ensemble: list[Member]
    names: list[str]
    """The systems compared (with --choose: the members alone)."""
    members_alone: list[str]
    chosen: list[System]
    solo: list[System]
    store: ResultStore
    out_dir: Path
    seed: int

    @property
    def title(self) -> str:
        members_line = "members: " + ", ".join(m.label for m in self.ensemble)
        return f"{self.evaluation.name}, {len(self.examples)} examples\n{members_line}"


def _need_eval_extra() -> None:
    """Fail with the way to install it when the eval extra is missing."""
    try:
        from . import choose, run, summary, systems, tasks  # noqa: F401
    except ImportError as error:
        raise fail(
            f"eval needs the eval extra ({error}): pip install 'specem-chain[eval]'"
        ) from None


def _plan(
    task: str,
    data: Path,
    specs: list[str],
    limit: int | None,
    skip: int,
    seed: int,
    systems: str | None,
    choose: bool,
    backend: BackendName,
    order: str,
    settings: RequestSettings,
    out_dir: Path,
) -> Planned:
    """The members, examples, systems and results store, or a clear error."""
    from ..errors import SpecEMError
    from . import run
    from .systems import (
        Settings,
        build_systems,
        member_system_name,
        recipes,
        split_names,
        system_names,
    )
    from .tasks import TASKS

    evaluation = TASKS[task]
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
    return Planned(
        evaluation, examples, ensemble, names, members_alone, chosen, solo, store, out_dir, seed
    )


def _answer(planned: Planned) -> None:
    """Every system's answers that the store does not hold yet."""
    from ..errors import SpecEMError
    from . import run

    p = planned
    quiet_transformers()
    try:
        asyncio.run(run.run(p.evaluation, p.examples, p.chosen, p.solo, p.store, err))
    except KeyboardInterrupt:
        err.print(f"interrupted: run the same command again to resume from {p.out_dir}")
        raise typer.Exit(130) from None
    except SpecEMError as error:
        raise fail(str(error)) from None


def _scored(planned: Planned) -> tuple[Any, Any, Any, Any]:
    """The answers' scores, the summary, its comparison with the best member alone and the
    costs, with the summary's files written."""
    from . import summary

    evaluation, names = planned.evaluation, planned.names
    scores = summary.score_answers(evaluation, planned.store, names, planned.examples)
    result = summary.summarise(evaluation, scores, planned.seed)
    comparison = summary.compare_with_best_member(evaluation, scores, result, planned.members_alone)
    cost = summary.costs(planned.store.records, scores)
    summary.write(result, planned.out_dir, planned.title, comparison, cost)
    return scores, result, comparison, cost


def _write_summary(planned: Planned) -> None:
    """The summary, printed and written."""
    from . import summary

    _, result, comparison, cost = _scored(planned)
    typer.echo(summary.markdown(result, comparison, cost), nl=False)
    out_dir = planned.out_dir
    err.print(f"results in {out_dir}: summary.md, {{summary,metrics,paired,cost}}.json, chart.png")


def _write_choice(planned: Planned, specs: list[str], options: list[str]) -> None:
    """--choose's choice, with ``options`` for the ensemble's own run."""
    from . import choose

    scores, result, _, cost = _scored(planned)
    spelled = {m.label: spec for m, spec in zip(planned.ensemble, specs)}
    document = choose.from_run(planned.evaluation, scores, result, cost, spelled, options)
    typer.echo(choose.write(document, planned.out_dir, planned.title), nl=False)
    err.print(f"results in {planned.out_dir}: choice.md, choice.json and the summary's files")


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
            given[option_name(name)] = value
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
