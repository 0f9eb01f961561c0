"""What one batched llama.cpp step costs: one token in each of B sequences, against one.

    ./run python benchmarks/batched_step.py [NAME ...]

For each built-in member (default: the default members) and 1 or 2 threads, the median time
of one ``llama_decode`` over B = 1, 2, 4 and 8 sequences (one new token each, after a short
shared prompt), over 20 steps. Batching can give at most B times the time per token of one
sequence over the time per token of B: this bounds what ``Member(batching=True)`` gains.
"""

from __future__ import annotations

import statistics
import sys
import time

import llama_cpp
from llama_cpp._internals import LlamaContext

from specem_chain.models import DEFAULT_MEMBERS, gguf_path

SIZES = (1, 2, 4, 8)
STEPS = 20


def fill(batch: llama_cpp.llama_batch, tokens: list[tuple[int, int, int]]) -> None:
    """``tokens``: (token, position, sequence); logits for every one."""
    batch.n_tokens = len(tokens)
    for i, (token, position, seq) in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
        batch.seq_id[i][0], batch.logits[i] = seq, True


def measure(name: str) -> None:
    llm = llama_cpp.Llama(str(gguf_path(name)), n_ctx=256, verbose=False)
    params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_ctx, params.n_seq_max, params.kv_unified = 4096, max(SIZES), True
    ctx = LlamaContext(model=llm._model, params=params, verbose=False)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    prompt = llm.tokenize(b"Explain how a refrigerator keeps food cold, in detail.")
    for seq in range(max(SIZES)):
        fill(batch, [(t, i, seq) for i, t in enumerate(prompt)])
        llama_cpp.llama_decode(ctx.ctx, batch)
    at = len(prompt)
    for threads in (1, 2):
        llama_cpp.llama_set_n_threads(ctx.ctx, threads, threads)
        one = None
        for size in SIZES:
            times = []
            for step in range(STEPS):
                fill(batch, [(prompt[step % len(prompt)], at, seq) for seq in range(size)])
                start = time.perf_counter()
                llama_cpp.llama_decode(ctx.ctx, batch)
                times.append(time.perf_counter() - start)
                for seq in range(size):
                    llama_cpp.llama_memory_seq_rm(ctx.memory, seq, at, -1)
            step_s = statistics.median(times)
            one = one or step_s
            print(
                f"| {name} | {threads} | {size} | {step_s * 1000:.1f} | "
                f"{step_s / size * 1000:.1f} | {one * size / step_s:.2f}x |"
            )


if __name__ == "__main__":
    print("| member | threads | sequences | ms a step | ms a token | throughput vs one |")
    print("|---|---|---|---|---|---|")
    for member in sys.argv[1:] or DEFAULT_MEMBERS:
        measure(member)
