"""A built-in model's GGUF converted once into a float32 safetensors folder, which
transformers loads in about a second (loading a GGUF directly takes 20-40 s)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from threading import Lock

from . import cache
from .fetch import ensure_gguf
from .registry import BuiltinModel, builtin_model


def model_folder(name: str | BuiltinModel, *, progress: bool = True) -> Path:
    """The model's safetensors folder (``cache_dir()/models/<name>``), built on first use."""
    model = builtin_model(name)
    target = cache.folder(model)
    if cache.is_complete(target, model):
        return target
    with cache.locked(model), cache.progress(progress) as prog:
        if cache.is_complete(target, model):
            return target
        gguf = ensure_gguf(model, prog)
        target.parent.mkdir(parents=True, exist_ok=True)
        cache.clear_stale(target.parent, f".{model.name}.tmp-")
        tmp = target.parent / f".{model.name}.tmp-{os.getpid()}"
        try:
            task = cache.task(prog, f"Converting {model.name} to safetensors")
            convert(gguf, tmp)
            cache.mark_complete(tmp, model)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            cache.finish(prog, task)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


_PATCHED = Lock()  # _reading_gguf patches gguf-py for the whole process


def convert(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF with transformers and save it as a float32 safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    load = {"gguf_file": gguf.name, "local_files_only": True}
    with _reading_gguf(), _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **load)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **load)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


@contextmanager
def _reading_gguf() -> Iterator[None]:
    """transformers parses a GGUF anew for the tokenizer, the config and the weights, and
    builds gguf-py's tensor-name map anew for every submodule of the model (hundreds): in
    this block both are kept, and a conversion takes 40% of the time (SmolLM2: 54 s → 22 s)."""
    import gguf

    with _PATCHED:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader, gguf.get_tensor_name_map = lru_cache(reader), lru_cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' progress bars off, its GGUF loader's own tqdm bar included (that one
    ignores transformers' switch)."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging

    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if bars:
            logging.enable_progress_bar()
