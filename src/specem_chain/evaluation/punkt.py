"""NLTK's English Punkt tables (``punkt_tab``), which IFEval's checkers need, without NLTK's
downloader (it fetches from GitHub; an offline machine often reaches only a package index).

The tables come from a pinned wheel on the package index that ships NLTK's data:
``llama-index-core==0.14.25`` (MIT), under ``llama_index/core/_static/nltk_cache/``. The wheel
is fetched into the cache with ``pip download --no-deps`` as the built-in members' weight
wheels are (:func:`specem_chain.models.fetch.wheel`); only :data:`FILES` are taken out of it,
each checked against its pinned sha256, and the wheel is deleted. Nothing of llama-index is
installed or imported.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

from filelock import FileLock

from ..errors import SpecEMError
from ..models import cache, fetch

PACKAGE, VERSION = "llama-index-core", "0.14.25"
INSIDE = "llama_index/core/_static/nltk_cache/"
"""Where the wheel keeps its NLTK data folder."""
FILES = {
    "tokenizers/punkt_tab/README": (
        "d3251cae66a9359bd68c039e3a46172a05ca9df0b27dcdfa23ae594d68d27ec4"
    ),
    "tokenizers/punkt_tab/english/abbrev_types.txt": (
        "92a3e070f43d9b4c5534758ca40ad7343b04e7e29bfe0c2eb658a39445a4f779"
    ),
    "tokenizers/punkt_tab/english/collocations.tab": (
        "8e2da1225e4dd2cc9dba261ee231ccb134859e21b46006e7f472c5ee269af0cf"
    ),
    "tokenizers/punkt_tab/english/ortho_context.tab": (
        "4bbcca25ed3d3f06c02402abf8419b9f033b8adc06e7b482eca4e45f81a5dc4c"
    ),
    "tokenizers/punkt_tab/english/sent_starters.txt": (
        "f3f8535483e1dba487241b764945168123bca3209a9645e59acd1225dc76edac"
    ),
}
"""The files taken, relative to an NLTK data folder, and their sha256: NLTK's "Pretrained
Punkt Models" (Kiss and Strunk, 2006) for English and their README."""


def data_dir() -> Path:
    """The NLTK data folder in the cache: ``<cache>/nltk_data``."""
    return cache.cache_dir() / "nltk_data"


def punkt_data(*, progress: bool = True) -> Path:
    """An NLTK data folder holding :data:`FILES`, verified; fetched on first use."""
    root = data_dir()
    if _verified(root):
        return root
    lock = cache.cache_dir() / "locks" / "punkt_tab.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)), cache.progress(progress) as prog:
        if _verified(root):
            return root
        wheel = fetch.wheel(
            PACKAGE,
            VERSION,
            prog,
            holds="NLTK's Punkt tables, which IFEval's checkers need",
            first_use="The first use of the instruction checkers downloads it",
        )
        _extract(wheel, root)
        wheel.unlink()
    return root


def use_punkt(*, progress: bool = True) -> Path:
    """Make NLTK find the Punkt tables: :func:`punkt_data`, put first on ``nltk.data.path``
    and on ``NLTK_DATA`` (for child processes). Call it before importing lm-eval's IFEval
    code, which otherwise tries NLTK's downloader when it is imported."""
    import nltk

    root = str(punkt_data(progress=progress))
    if root not in nltk.data.path:
        nltk.data.path.insert(0, root)
    paths = os.environ.get("NLTK_DATA", "").split(os.pathsep)
    if root not in paths:
        os.environ["NLTK_DATA"] = os.pathsep.join([root, *filter(None, paths)])
    return Path(root)


def _verified(root: Path) -> bool:
    return all(
        (root / name).is_file() and _sha256((root / name).read_bytes()) == digest
        for name, digest in FILES.items()
    )


def _extract(wheel: Path, root: Path) -> None:
    """Write :data:`FILES` from the wheel under ``root``, each checked before it is placed."""
    staging = root.parent / f".nltk_data.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name, digest in FILES.items():
                data = zf.read(INSIDE + name)
                if _sha256(data) != digest:
                    raise SpecEMError(
                        f"{INSIDE + name} in {wheel} has sha256 {_sha256(data)}, expected "
                        f"{digest}: the wheel is not the pinned {PACKAGE}=={VERSION}. It was "
                        "deleted; try again."
                    )
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_bytes(data)
        for name in FILES:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, root / name)
    except (zipfile.BadZipFile, KeyError) as exc:
        wheel.unlink(missing_ok=True)
        raise SpecEMError(
            f"{wheel} is damaged or lacks NLTK's Punkt tables under {INSIDE}. It was deleted; "
            "try again."
        ) from exc
    except SpecEMError:
        wheel.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
