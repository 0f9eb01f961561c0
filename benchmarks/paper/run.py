"""The paper's comparison, one command: each member alone, the paper's method and the
project's default policy, on GSM8K and instruction following, paired, with the forest plot.

    ./run python benchmarks/paper/run.py \\
        --member vllm+http://gpu-1:8000 --member vllm+http://gpu-2:8000 \\
        --member vllm+http://gpu-3:8000 --out eval/paper

Members are any member specs; the comparison is made for members that users serve, one
model per vLLM server (``vllm+http://host:port``, ``#model`` when a server serves several).
Every system answers every example with the same seed (example i: seed + i), the same
window and answer length, and no repetition penalty, so that the systems differ only in
how they ensemble:

- ``member:NAME``: each member alone;
- ``specem-paper``: the paper's method (its scores, rewards and weight updates);
- ``specem``: the project's default policy (``pool``: per-byte log-probs pooled by weight).

It runs ``specem eval`` once per task (resumable: run the same command again to go on),
then ``benchmarks/forest.py`` over both runs. OUT holds ``gsm8k/`` and ``instructions/``
(each ``specem eval``'s results, summary, paired comparisons and chart), ``forest.png`` and
``forest.md`` (every ensemble against the best member alone, with paired bootstrap 95%
intervals), and ``README.md``, which says all of it with the commands.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

from specem_chain.evaluation.cli import eval_members
from specem_chain.request import RequestSettings

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
TASKS = {
    "gsm8k": ROOT / "benchmarks" / "data" / "gsm8k" / "train-500.jsonl",
    "instructions": ROOT / "benchmarks" / "data" / "instructions-dev.jsonl",
}
ENSEMBLES = ("specem-paper", "specem")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--member", action="append", required=True, help="A member spec; two or more."
    )
    parser.add_argument(
        "--gsm8k", type=int, default=200, help="GSM8K problems (0: none). Default 200."
    )
    parser.add_argument(
        "--instructions",
        type=int,
        default=192,
        help="Instruction-following prompts (0: none). Default all 192.",
    )
    parser.add_argument("--max-tokens", type=int, default=512, help="Answer length limit.")
    parser.add_argument(
        "--window", type=int, default=RequestSettings().window, help="Tokens a draft."
    )
    parser.add_argument("--seed", type=int, default=0, help="Base seed.")
    parser.add_argument("--out", type=Path, default=Path("eval/paper"), help="Results folder.")
    args = parser.parse_args(argv)
    if len(args.member) < 2:
        parser.error("give two or more members: --member SPEC --member SPEC ...")

    members = eval_members(args.member, "auto", RequestSettings())
    systems = [f"member:{m.label}" for m in members] + list(ENSEMBLES)
    args.out.mkdir(parents=True, exist_ok=True)
    commands, runs, seconds = [], [], {}
    for task, limit in (("gsm8k", args.gsm8k), ("instructions", args.instructions)):
        if limit <= 0:
            continue
        folder = args.out / task
        command = [
            *specem(),
            "eval",
            "--task",
            task,
            "--data",
            str(TASKS[task]),
            "--limit",
            str(limit),
            "--members",
            ",".join(args.member),
            "--systems",
            ",".join(systems),
            "--max-tokens",
            str(args.max_tokens),
            "--window",
            str(args.window),
            "--repeat-penalty",
            "1",
            "--seed",
            str(args.seed),
            "--out",
            str(folder),
        ]
        commands.append(command)
        started = time.monotonic()
        run(command)
        seconds[task] = time.monotonic() - started
        runs.append(f"{task}={folder}")
    if not runs:
        parser.error("nothing to run: --gsm8k and --instructions are both 0")
    forest = [sys.executable, str(HERE.parent / "forest.py"), "--out", str(args.out / "forest")]
    commands.append([*forest, *runs])
    run(commands[-1])
    write_readme(args.out, members, commands, seconds)
    print(f"results: {args.out}/README.md, forest.png, forest.md, and one folder per task")


def specem() -> list[str]:
    """The ``specem`` command of this Python."""
    return [sys.executable, "-c", "from specem_chain.cli import app; app()"]


def run(command: list[str]) -> None:
    print("+", shlex.join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def write_readme(out: Path, members: list, commands: list[list[str]], seconds: dict) -> None:
    parts = [
        "# The paper's comparison\n",
        "Members: " + ", ".join(f"`{m.label}` ({m.source})" for m in members) + ".\n",
        "Each member alone, the paper's method (`specem-paper`) and the project's default "
        "policy (`specem`), paired example by example (same seeds), no repetition penalty.\n",
    ]
    for task, took in seconds.items():
        summary = (out / task / "summary.md").read_text(encoding="utf-8")
        parts.append(f"## {task} ({took / 60:.0f} min)\n\n{summary}")
    forest = (out / "forest.md").read_text(encoding="utf-8")
    parts.append(f"## Every ensemble against the best member alone\n\n{forest}\n![](forest.png)\n")
    made = "\n".join(shlex.join(c) for c in commands)
    parts.append(f"## Commands\n\n```bash\n{made}\n```\n")
    (out / "README.md").write_text("\n".join(parts), encoding="utf-8")


if __name__ == "__main__":
    main()
