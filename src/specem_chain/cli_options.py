"""What every ``specem`` command shares: an option for each request setting, derived from
its declaration (:class:`~specem_chain.request.RequestSettings`: its type, default and
help), and one-line errors that name the option."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.text import Text

from .feedback import DEFAULT_TASK, Feedback, checked_task, is_url
from .members import Member, member_list
from .models import DEFAULT_MEMBERS
from .request import RequestSettings

F = TypeVar("F", bound=Callable[..., Any])

err = Console(stderr=True, highlight=False)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` and return the exit (status 2) to raise."""
    # one line whatever the terminal's width: the terminal wraps it, not rich
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    return typer.Exit(2)


def option_name(name: str) -> str:
    """The command-line option of the setting ``name`` (``max_tokens``: ``--max-tokens``)."""
    return "--" + name.replace("_", "-")


def describe(error: ValidationError) -> str:
    """One line per invalid setting, named as the command line names it."""
    return "; ".join(
        f"{option_name('_'.join(str(p) for p in e['loc']))}: {e['msg']}" for e in error.errors()
    )


def chosen_members(specs: Sequence[str] | None) -> list[Member]:
    """The members that ``--member`` options name (none: the embedded default ensemble);
    a bad spec exits with a one-line error."""
    try:
        return member_list(specs or DEFAULT_MEMBERS)
    except ValidationError as error:
        raise fail(describe(error)) from None
    except ValueError as error:  # member names that are not unique
        raise fail(str(error)) from None


def chosen_feedback(
    location: str | Path | None, task: str | None, *, json_file: bool
) -> Feedback | None:
    """The task feedback that ``--feedback PATH|URL`` and ``--task NAME`` name (None without
    ``--feedback``): the task (None: :data:`~specem_chain.feedback.DEFAULT_TASK`) of the
    feedback store at ``location``, a SQLite file's path or a ``postgresql://`` URL, made
    where there is none yet; or, where ``json_file`` allows it, for a path ending in .json,
    the feedback saved in that JSON file (a new one if there is none yet). A bad combination
    or a store that cannot be opened exits with a one-line error naming ``--feedback`` or
    ``--task`` (never a password), before any member runs."""
    if location is None:
        if task is not None:
            raise fail("--task: give --feedback too, the feedback store the task is kept in")
        return None
    path = Path(location)
    if is_url(location) or path.suffix.lower() != ".json":
        try:
            task = checked_task(DEFAULT_TASK if task is None else task)
        except ValueError as error:
            raise fail(f"--task: {error}") from None
        try:
            return Feedback.open(location, task)
        except ValueError as error:
            raise fail(f"--feedback: {error}") from None
    if not json_file:
        raise fail(
            f"--feedback: {str(path)!r} names a JSON feedback file, which one "
            "process saves whole; the workers of specem serve share a feedback store: give "
            "a path that does not end in .json, such as tasks.db"
        )
    if task is not None:
        raise fail(
            "--task: a JSON feedback file holds one task; a feedback store (a --feedback "
            "path not ending in .json) holds many"
        )
    if not path.parent.is_dir():
        raise fail(f"--feedback: folder {str(path.parent)!r} does not exist")
    if not path.exists():
        return Feedback()
    try:
        return Feedback.load(path)
    except ValueError as error:
        raise fail(f"--feedback: {error}") from None


def setting_option(
    name: str, model: type[BaseModel] = RequestSettings, aliases: Sequence[str] = ()
) -> inspect.Parameter:
    """The command-line option of the field ``name`` of ``model`` (a request setting unless
    said), also named by ``aliases``. A choice among names (or none) is read as text, so
    that pydantic checks it with the other fields and a bad one gets the same one-line
    error."""
    field = model.model_fields[name]
    choices = [field.annotation, *get_args(field.annotation)]  # a choice, or one or None
    kind = str if any(get_origin(a) is Literal for a in choices) else field.annotation
    names = (option_name(name), *aliases) if aliases else ()
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=field.default,
        annotation=Annotated[kind, typer.Option(*names, help=field.description)],
    )


def with_settings(
    names: Sequence[str] | None = None,
    *,
    model: type[BaseModel] = RequestSettings,
    into: str = "settings",
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> Callable[[F], F]:
    """Give a command an option for each field of ``model`` in ``names`` (every one when
    None; by default the request settings), some also named by their ``aliases``; the
    command gets them validated together as its parameter ``into``, a ``model``, and a bad
    value exits with status 2 and one line that names its option."""
    chosen = tuple(model.model_fields if names is None else names)

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != into]
        options = [setting_option(n, model, (aliases or {}).get(n, ())) for n in chosen]

        @functools.wraps(command)
        def run(**arguments: Any) -> Any:
            values = {name: arguments.pop(name) for name in chosen}
            try:
                made = model(**values)
            except ValidationError as error:
                raise fail(describe(error)) from None
            return command(**arguments, **{into: made})

        parameters = [*own, *options]
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        del run.__wrapped__  # typer reads the signature above, not the command's
        return run  # type: ignore[return-value]

    return decorate


def quiet_transformers() -> None:
    """transformers' warnings and progress bars off (a command prints its own)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging
    except ImportError:
        return
    logging.set_verbosity_error()
    logging.disable_progress_bar()
