"""The GPU check of the in-process transformers path; writes gpu-check.json and gpu-check.md.

    python benchmarks/gpu/check.py --device cuda --part all --out DIR
    python benchmarks/gpu/check.py --device cpu --part all --scale tiny --out DIR  # as CI

Part ``tiny`` (tiny_members.py): what the CPU tests check, on tiny random members on the
device in its dtype (bfloat16 on CUDA, float32 on the CPU). Part ``real`` (real_size.py):
members with random weights at the sizes of Qwen2.5-1.5B and Qwen2.5-7B (``--scale real``,
with the Qwen2.5 tokenizer from ``--tokenizer``) or at a size a CPU runs in seconds
(``--scale tiny``, with the tests' tiny tokenizer), timed alone, as an ensemble and under
the anchored policy. The figures are rewritten after every check and every timed run, so a
run stopped at its time limit still leaves what it measured. Exits 1 when a check failed.
See benchmarks/gpu/README.md for running it on a GPU machine in one call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# this folder's parts, and the tests' own builders (tiny_models, reference_scoring)
sys.path[:0] = [str(HERE), str(ROOT / "tests")]

import real_size  # noqa: E402
import tiny_members  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tiny_models import build_tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

TOKENIZER = HERE / "carry" / "qwen2.5-tokenizer.tar.xz"
"""The Qwen2.5 tokenizer that prepare.py writes (from the built-in Qwen2.5-Coder 0.5B's GGUF)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--part", choices=["tiny", "real", "all"], default="all")
    parser.add_argument("--scale", choices=["real", "tiny"], default="real")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    parser.add_argument("--tokens", type=int, default=256, help="answer length, each run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--seconds",
        type=float,
        default=300,
        help="time for the timed runs: a repeat starts only if it should end within it",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if args.part != "tiny" and args.scale == "real" and not args.tokenizer.exists():
        parser.error(
            f"--tokenizer {args.tokenizer} does not exist: run benchmarks/gpu/prepare.py first, "
            "or give --scale tiny"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, header(args))
    with tempfile.TemporaryDirectory() as scratch:
        if args.part in ("tiny", "all"):
            tiny_part(report, Path(scratch), args.device)
        if args.part in ("real", "all"):
            real_part(report, Path(scratch), args)
    report.write()
    return 0 if report.passed else 1


def header(args: argparse.Namespace) -> dict[str, Any]:
    device: dict[str, Any] = {"type": args.device, "name": platform.processor() or "CPU"}
    if args.device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        device |= {
            "name": properties.name,
            "capability": f"{properties.major}.{properties.minor}",
            "memory_gib": round(properties.total_memory / 2**30, 1),
        }
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "dtype": "bfloat16" if args.device == "cuda" else "float32",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "specem-chain commit": commit(),
        },
        "command": " ".join(sys.argv),
    }


def commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def tiny_part(report: Report, scratch: Path, device: str) -> None:
    dtype = "bfloat16" if device == "cuda" else "float32"
    checks = tiny_members.TinyChecks(tiny_members.build(scratch / "tiny"), device, dtype)
    for name, check in tiny_members.checks(checks).items():
        started = time.perf_counter()
        try:
            result: dict[str, Any] = {"passed": True, "detail": asyncio.run(check())}
        except Exception as error:  # every check runs and says what failed
            result = {
                "passed": False,
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(),
            }
        result["seconds"] = round(time.perf_counter() - started, 2)
        report.checks[name] = result
        report.write()
        print(f"{'ok  ' if result['passed'] else 'FAIL'} {name}", flush=True)


def real_part(report: Report, scratch: Path, args: argparse.Namespace) -> None:
    if args.scale == "real":
        tokenizer = AutoTokenizer.from_pretrained(unpacked(args.tokenizer, scratch))
        tokens, repeats = args.tokens, args.repeats
    else:
        tokenizer = build_tokenizer(scratch / "tiny-tokenizer")
        tokens, repeats = min(args.tokens, 24), min(args.repeats, 1)
    shapes = real_size.SHAPES[args.scale]
    started = time.perf_counter()
    small, large = (
        real_size.build_member(name, shapes[name], tokenizer, args.device)
        for name in (real_size.SMALL, real_size.LARGE)
    )
    report.real = {
        "scale": args.scale,
        "shapes": shapes,
        "tokenizer_tokens": len(tokenizer),
        "fixed_length": real_size.FIXED_LENGTH,
        "build_s": round(time.perf_counter() - started, 1),
    }

    def progress(figures: dict[str, Any]) -> None:
        report.real |= figures
        report.write()
        latest = figures["rows"][-1]
        print(f"     {latest['system']}: run {latest['runs']}", flush=True)

    report.real |= real_size.measure(small, large, tokens, repeats, args.seconds, progress)
    finished = all(row["finish_reasons"] == ["length"] for row in report.real["rows"])
    report.checks["timed answers ran to their fixed length"] = {"passed": finished}
    print(f"{'ok  ' if finished else 'FAIL'} real-size timings", flush=True)


def unpacked(tokenizer: Path, scratch: Path) -> Path:
    """A tokenizer folder: ``tokenizer`` itself, or the .tar.xz archive unpacked."""
    if tokenizer.is_dir():
        return tokenizer
    with tarfile.open(tokenizer, "r:xz") as archive:
        archive.extractall(scratch / "tokenizer", filter="data")
    return scratch / "tokenizer"


class Report:
    """The check's results, written as gpu-check.json and gpu-check.md in ``out``."""

    def __init__(self, out: Path, header: dict[str, Any]) -> None:
        self.out, self.header = out, header
        self.checks: dict[str, dict[str, Any]] = {}
        self.real: dict[str, Any] = {}

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.checks.values())

    def write(self) -> None:
        result = {**self.header, "passed": self.passed, "checks": self.checks, "real": self.real}
        (self.out / "gpu-check.json").write_text(json.dumps(result, indent=1) + "\n")
        (self.out / "gpu-check.md").write_text(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    """The results as one page: the device, the checks, the timings."""
    device = result["device"]
    lines = [
        f"GPU check, {result['date']}: {device['name']} ({device['type']}, {result['dtype']}); "
        + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
        + ".",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    for name, check in result["checks"].items():
        detail = check.get("error") or json.dumps(check.get("detail", ""))
        lines.append(f"| {name} | {'passed' if check['passed'] else 'FAILED'} | {detail} |")
    real = result["real"]
    if real.get("rows"):
        lines += [
            "",
            f"Members with random weights, {real['scale']} sizes; answers of {real['tokens']} "
            f"tokens, window {real['window']}; median of the runs. {real['fixed_length']}",
            "",
            "| system | runs | tokens/s | first segment (s) | overhead vs slower alone "
            "| vs both alone | peak GPU memory (GiB) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in real["rows"]:
            lines.append(
                f"| {row['system']} | {row['runs']} | {row['tokens_per_s']:.1f} "
                f"| {number(row['first_segment_s'], 3)} "
                f"| {number(row.get('overhead_vs_slower_alone'), 2)} "
                f"| {number(row.get('overhead_vs_both_alone'), 2)} "
                f"| {number(row['peak_gpu_gib'], 1)} |"
            )
        if (share := real["rows"][-1].get("share_of_rounds_anchor_alone")) is not None:
            lines += ["", f"The anchor decided {share:.0%} of its rounds alone."]
        lines += [
            "",
            "Overhead: the ensemble's time per answer token over the 7B's alone through the "
            "same engine (slower alone), and over both members' alone added up. Peak GPU "
            "memory: torch.cuda.max_memory_allocated over a run; both members' weights stay "
            "on the GPU throughout.",
        ]
    return "\n".join(lines) + "\n"


def number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
