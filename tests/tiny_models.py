"""Tiny random causal LMs built offline, for tests where only the plumbing matters."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many.",
    "How many clips did Natalia sell altogether in April and May?",
    "Speculative decoding drafts tokens with a small model and verifies them.",
    "An ensemble of language models writes one answer together, one segment at a time.",
    "1 2 3 4 5 6 7 8 9 10 11 12 + - * / = ( ) , . ! ? ; : ' \"",
]


def build_tokenizer(folder: Path, vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with chat-template special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A template that rejects a system turn, as some real ones (Gemma 2, Mistral) do."""

TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>"
    "{{ 'user' if m['role'] == 'tool' else m['role'] }}\n"
    "{% if m['role'] == 'tool' %}<tool_response>{{ m['content'] }}</tool_response>"
    "{% else %}{{ m['content'] }}{% endif %}"
    "{% for c in m.get('tool_calls', []) %}<tool_call>{{ c['function'] | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A template with tool support, in the shape of Qwen2.5's."""


def build_model(
    folder: Path, architecture: str, *, chat_template: str | None = CHAT_TEMPLATE
) -> Path:
    """Save a tiny random model of ``architecture`` ("llama" or "qwen2") into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(folder)
    if chat_template != CHAT_TEMPLATE:
        tokenizer.chat_template = chat_template
        tokenizer.save_pretrained(folder)
    config_class = {"llama": LlamaConfig, "qwen2": Qwen2Config}[architecture]
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # sharpen the random logits so sampling is not uniform noise
        model.lm_head.weight.mul_(20)
    model.save_pretrained(folder)
    return folder


def build_gguf(folder: Path) -> Path:
    """Write the tiny "llama" model in ``folder`` as ``folder/model.gguf``, laid out as
    llama.cpp's own converter writes it (Q8_0 matrices, q and k rows permuted for its rotary
    layout, a byte-level BPE vocabulary with its merges), so that llama.cpp and transformers'
    GGUF loader both read it. transformers loads it in well under a second (SmolLM2's GGUF,
    with its 49,152-token vocabulary, takes 20-40 s)."""
    merges = json.loads((folder / "tokenizer.json").read_text())["model"]["merges"]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = model.config
    out = folder / "model.gguf"
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(tokenizer))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    ids = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([token for token, _ in ids])
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for _, i in ids]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(config.bos_token_id)  # <|im_start|>, as SmolLM2's is
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        data = tensor.numpy()
        if name.endswith("q_proj.weight"):
            data = _rotary_rows(data, heads)
        elif name.endswith("k_proj.weight"):
            data = _rotary_rows(data, kv_heads)
        target = names.get_name(name, try_suffixes=(".weight",))
        if data.ndim == 2:
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(target, gguf.quants.quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(target, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _rotary_rows(weights, heads: int):
    """q or k rows from transformers' rotary layout (halves) to llama.cpp's (pairs), as
    llama.cpp's converter permutes them (and transformers' GGUF loader permutes back)."""
    rows = weights.shape[0]
    return weights.reshape(heads, 2, rows // heads // 2, -1).swapaxes(1, 2).reshape(weights.shape)
