"""``python -m lm_eval_specem`` (or ``lm-eval-specem``): the harness's own command line with
the model ``specem`` registered and this package's tasks on the include path.

lm-eval 0.4 finds models only in its own registry, which an installed package cannot add
to before the ``lm_eval`` command resolves ``--model``; importing the model first and then
running the harness's CLI is the way its maintainers suggest (EleutherAI/lm-evaluation-harness
issue 1621); a harness with plugin support reads the package's ``lm_eval.models`` entry
point instead. The arguments are the harness's, unchanged, plus these defaults: when no
``--include_path`` is given, this package's tasks folder; when a task named ``*ifeval*`` is
asked for, NLTK's Punkt tables are made available first (from specem's cache).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lm_eval.__main__ import cli_evaluate

from specem_chain.evaluation.punkt import use_punkt

from .tasks import TASKS_DIR


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and not any(a.split("=")[0] == "--include_path" for a in args):
        args += ["--include_path", str(TASKS_DIR)]
    if any("ifeval" in value for value in option(args, "--tasks")):
        use_punkt()
    sys.argv = ["lm-eval", *args]
    cli_evaluate()


def option(args: Sequence[str], name: str) -> list[str]:
    """The values given to ``name`` (as ``name value`` or ``name=value``)."""
    found = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    found += [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    return found
