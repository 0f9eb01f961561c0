"""The package's shape, read from its source: layers import only downwards, and functions
stay short enough to read."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency before 3.11
    import tomli as tomllib

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "specem_chain"
ADAPTERS = sorted(p.parent for p in (ROOT / "adapters").glob("*/pyproject.toml"))

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
    "cli_options": 6,
    "evaluation": 6,
    "benchmark": 6,
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


# -- across packages: the core and the adapters ------------------------------------------


def distribution(folder: Path) -> str:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]


def top_packages(adapter: Path) -> set[str]:
    """The import names an adapter's source defines (``llama_index.llms.specem``...)."""
    source = adapter / "src"
    return {
        ".".join(init.parent.relative_to(source).parts)
        for init in source.rglob("__init__.py")
        if not (init.parent.parent / "__init__.py").exists() or init.parent.parent == source
    }


def imports_anywhere(path: Path) -> set[str]:
    """Every module ``path`` imports by absolute name, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def names_any(modules: set[str], packages: set[str]) -> set[str]:
    return {m for m in modules for p in packages if m == p or m.startswith(p + ".")}


ADAPTER_PACKAGES = {adapter.name: top_packages(adapter) for adapter in ADAPTERS}


def test_every_adapter_is_seen():
    assert len(ADAPTERS) == 4 and all(ADAPTER_PACKAGES.values())
    assert "specem_openai_server" in ADAPTER_PACKAGES["specem-openai-server"]
    assert "llama_index.llms.specem" in ADAPTER_PACKAGES["llama-index-llms-specem"]


def test_the_core_never_imports_an_adapter():
    every = set().union(*ADAPTER_PACKAGES.values())
    for path in modules():
        assert names_any(imports_anywhere(path), every) == set(), path.name


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda p: p.name)
def test_an_adapter_imports_the_core_and_no_other_adapter(adapter: Path):
    others = set().union(*(v for k, v in ADAPTER_PACKAGES.items() if k != adapter.name))
    sources = list((adapter / "src").rglob("*.py"))
    for path in sources + list((adapter / "tests").rglob("*.py")):
        assert names_any(imports_anywhere(path), others) == set(), path.name
    assert any(names_any(imports_anywhere(p), {"specem_chain"}) for p in sources)


def test_packages_depend_downwards_only():
    """The core's dependencies (extras included) name no adapter; each adapter depends on
    the core and on no other adapter."""
    adapters = {distribution(a) for a in ADAPTERS}
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*core["dependencies"], *itertools.chain(*core["optional-dependencies"].values())]
    assert not [d for d in wanted if any(d.startswith(a) for a in adapters)]
    for adapter in ADAPTERS:
        project = tomllib.loads((adapter / "pyproject.toml").read_text())["project"]
        needs = [
            *project["dependencies"],
            *itertools.chain(*project.get("optional-dependencies", {}).values()),
        ]
        assert any(d.startswith("specem-chain") for d in project["dependencies"])
        assert not [d for d in needs if any(d.startswith(a) for a in adapters)], adapter.name


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


def test_the_command_line_starts_without_langchain_or_the_metrics_libraries():
    """``specem`` and ``benchmarks/forest.py`` start in about a second: LangChain comes with
    ``SpecEMChatModel`` (on first use) and rouge-score (nltk, scipy) with its scorer."""
    script = (
        "import sys, specem_chain, specem_chain.cli, specem_chain.evaluation.summary\n"
        "slow = {'langchain_core', 'rouge_score', 'nltk', 'scipy'} & set(sys.modules)\n"
        "assert not slow, slow\n"
        "assert specem_chain.SpecEMChatModel.__module__ == 'specem_chain.chat_model'\n"
        "assert 'langchain_core' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
