"""The package's shape, read from its source: layers import only downwards, and functions
stay short enough to read."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "src" / "specem_chain"

LAYERS = {
    "errors": 0,
    "engine": 1,
    "members": 2,
    "models": 3,
    "backends": 4,
    "answer_formats": 5,
    "feedback": 5,
    "request": 5,
    "sync": 5,
    "chat_model": 6,
    "structured_output": 6,
    "report": 6,
    "cli": 6,
    "evaluation": 6,
    "benchmark": 6,
    "servers": 6,
    "__init__": 7,
}
"""Each top-level module or folder of the package and its layer, lowest first (see the
Concepts page's diagram): a module imports only from its own layer or lower ones."""

LONG_FUNCTION = 60
"""Lines of a function's body (its signature and docstring aside) past which a comment in
it must say why it is one function."""


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def part(path: Path) -> str:
    """The top-level module or folder of the package that ``path`` belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported(path: Path) -> set[str]:
    """The package's modules that ``path`` imports (anywhere in it), as dotted paths below
    ``specem_chain``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [[*target, alias.name] for alias in node.names]
            elif node.module and node.module.startswith("specem_chain"):
                target = node.module.split(".")[1:]
                names = [[*target, alias.name] for alias in node.names]
            else:
                continue
            found.update(".".join(n) for n in [target, *names] if n)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("specem_chain."):
                    found.add(alias.name.removeprefix("specem_chain."))
    return {name for name in found if name.split(".")[0] in LAYERS}


def test_every_part_of_the_package_has_a_layer():
    assert {part(p) for p in modules()} <= set(LAYERS)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_its_own_layer_or_lower(path):
    layer = LAYERS[part(path)]
    upward = sorted(n for n in imported(path) if LAYERS[n.split(".")[0]] > layer)
    assert upward == [], f"{path.relative_to(PACKAGE)} imports a higher layer"


def test_the_engine_imports_nothing_but_itself_and_the_errors():
    for path in (PACKAGE / "engine").rglob("*.py"):
        outside = {n.split(".")[0] for n in imported(path)} - {"engine", "errors"}
        assert outside == set(), path.name


def test_backends_never_fetch_or_convert_models():
    for path in (PACKAGE / "backends").rglob("*.py"):
        assert not any(n.split(".")[0] == "models" for n in imported(path)), path.name


def test_the_walk_sees_relative_and_absolute_imports(tmp_path):
    # the checker itself: a module that imports upwards is caught
    engine = PACKAGE / "engine" / "loop.py"
    assert "engine.rounds" in imported(engine) or "engine.rounds.accept" in imported(engine)
    assert any(n.startswith("engine") for n in imported(PACKAGE / "request.py"))


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:] or body  # the docstring
    return (body[-1].end_lineno or 0) - body[0].lineno + 1


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_long_functions_say_why(path):
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    unexplained = [
        f"{node.name} ({body_lines(node)} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and body_lines(node) > LONG_FUNCTION
        and not any("# one function:" in line for line in lines[node.lineno - 1 : node.end_lineno])
    ]
    assert unexplained == []


def test_the_package_imports_without_posix_only_modules():
    """``import specem_chain`` must work on Windows: no fcntl (nor other POSIX-only
    modules) at import time."""
    script = (
        "import sys\n"
        "for name in ('fcntl', 'termios', 'resource'):\n"
        "    sys.modules[name] = None  # importing it now raises ImportError\n"
        "import specem_chain, specem_chain.cli, specem_chain.models\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
