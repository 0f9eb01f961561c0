"""Members that run in this process with llama.cpp (llama-cpp-python), from a GGUF file.

A :class:`LlamaCppBackend` holds what is heavy and shared: one loaded ``Llama`` per GGUF
file, with its single KV cache, and the tokens that cache holds. A :class:`LlamaCppSession`
holds one request's token ids. Every call takes the backend's lock and brings the cache to
what it needs by reading only the tokens after the longest common prefix of the cache and
the session's context, so a request never re-reads its context. A member scores its own
candidate from the logits it drew the draft from, so verification reads only the other
members' candidates.

llama.cpp's numbers for a token depend slightly on how tokens were batched when read, so a
request must see only keys and values that its own calls would have built: when requests
interleave, the one that takes the cache over saves the other's state (its tokens' keys and
values) and restores its own. A context is read from its start in whole chunks of
:data:`CHUNK` tokens, so a new request keeps the whole chunks its prompt shares with the
cache an earlier request left (a system prompt, the tools, the turns before, the same
question under another seed) and reads only the rest, as it would have read it from an
empty cache. Answers are then the same whether requests run alone, together, or after
others.

The members of a round read side by side, each on its own thread, and share the process's
cores (:class:`Cores`).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp._internals import LlamaSampler, LlamaTokenDataArray

from ..engine.types import (
    REPEAT_LAST_N,
    Draft,
    Fits,
    Message,
    Sampling,
    Score,
    Scoring,
    Segment,
    Tool,
)
from ..errors import MemberSpecError
from ..members import Member, model_files
from .batching import Batcher, Slot
from .drafting import Sampler, check_prompt, common_prefix, draft_tokens
from .local import LocalSession
from .template import ChatTemplate

CONTEXT = 8192
"""Tokens one request's context may hold on a loaded model (fewer if the model was trained
on fewer)."""

CHUNK = 64
"""Tokens of a context read in one call from its start (see the module's docstring): a
later request shares whole chunks only. Smaller chunks share more of a prompt and read it
more slowly (Qwen2.5-Coder 1.5B on 2 cores, 256 tokens: 10% slower in chunks of 64 than
in one call, 19% in chunks of 32)."""

BATCH_CONTEXT = 2 * CONTEXT
"""Tokens the KV cache of a batching model holds for all its requests together."""

THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
"""The cores this process may run on (``taskset`` or a container's CPU set), not all the
machine's: the llama.cpp threads of the models reading tokens at one time (see
:class:`Cores`)."""

Logits = npt.NDArray[np.float32]


def gguf_file(member: Member) -> Path:
    """The GGUF a llama.cpp member loads (a built-in model's is resolved before)."""
    gguf = model_files(member.source).gguf
    if gguf is None:
        raise MemberSpecError(
            f"member {member.source!r} runs on llama.cpp, which needs a built-in model name "
            "or a .gguf file"
        )
    return gguf.resolve()


class Cores:
    """The process's cores, shared among the llama.cpp models reading tokens right now.

    The members of a round draft and verify side by side, each on its own thread. A
    one-token step runs on an equal share of the cores rather than on all of them, since
    more threads than cores make every one wait (on 2 cores, SmolLM2 and Qwen2.5-Coder
    stepping together take 26 ms a token pair with 2 threads each, 24 ms with 1). The share
    is taken again before every step, so a member left drafting alone gets every core. A
    read of many tokens (a prompt, a candidate) is one llama.cpp call that would keep its
    share after the other model is done, so it runs on every core. The thread count does
    not change llama.cpp's numbers, only its speed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0

    @contextmanager
    def share(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    def threads(self) -> int:
        """Threads for a one-token step now: the cores over the models reading (call
        inside :meth:`share`)."""
        return max(1, THREADS // self._busy)


_cores = Cores()


class LlamaCppBackend:
    """A loaded GGUF model, its KV cache and its tokenizer, shared by every request."""

    def __init__(self, llm: llama_cpp.Llama, *, name: str, batching: bool = False) -> None:
        self.llm = llm
        self.name = name
        self.batcher = Batcher(llm, BATCH_CONTEXT, _cores, THREADS) if batching else None
        """Reads every request's tokens on a context of its own, many requests at a step
        (:mod:`.batching`); None: one request at a time on ``llm``'s context."""
        self.lock = threading.Lock()
        """Held by every call that reads or changes the KV cache."""
        self.cached: list[int] = []
        """The tokens whose keys and values the KV cache holds, in order."""
        self.whole = 0
        """How many of :attr:`cached` were read in whole chunks from the start (a multiple
        of :data:`CHUNK`): what a new request may share."""
        self.owner: LlamaCppSession | None = None
        """The session whose calls built the cache, or the new one about to share it."""
        self.context_tokens = min(CONTEXT, llm._model.n_ctx_train() or CONTEXT)
        meta = llm.metadata
        special = {
            name: self.detokenize([int(meta[f"tokenizer.ggml.{name}_id"])], special=True)
            for name in ("bos_token", "eos_token")
            if f"tokenizer.ggml.{name}_id" in meta
        }
        self.template = ChatTemplate.from_source(meta.get("tokenizer.chat_template"), **special)
        self.end_of_turn, self.turn_end = self._end_of_turn(meta)

    def close(self) -> None:
        """Free the model and its contexts now (no request may be running on it)."""
        if self.batcher is not None:
            self.batcher.close()
        self.llm.close()

    def forget(self) -> None:
        """Empty the cache, so that the next request reads its whole prompt (see
        :func:`~specem_chain.backends.forget_prompts`). No request may be running on it."""
        with self.lock:
            self.llm._ctx.kv_cache_clear()
            self.cached, self.whole, self.owner = [], 0, None

    @classmethod
    def load(cls, member: Member) -> LlamaCppBackend:
        """Load the member's GGUF."""
        llm = llama_cpp.Llama(
            model_path=str(gguf_file(member)),
            n_ctx=CONTEXT if not member.batching else 256,  # batching reads on its own
            n_threads=THREADS,
            n_threads_batch=THREADS,
            verbose=False,
        )
        return cls(llm, name=member.label, batching=member.batching)

    def _end_of_turn(self, meta: dict[str, str]) -> tuple[frozenset[int], int]:
        """Token ids that end the member's turn (the GGUF's eos and eot, and the marker its
        template ends a turn with), and the one a finished candidate is scored with."""
        ids = [
            int(meta[key])
            for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eos_token_id")
            if key in meta
        ]
        marker = self.tokenize(self.template.end_of_turn) if self.template.end_of_turn else []
        if len(marker) == 1 and marker[0] not in ids:
            ids.insert(0, marker[0])
        if not ids:
            raise MemberSpecError(f"member {self.name!r}: its GGUF names no end-of-turn token")
        return frozenset(ids), ids[0]

    # -- text and tokens ---------------------------------------------------------------

    def tokenize(self, text: str, *, bos: bool = False, special: bool = True) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=bos, special=special)

    def encode(self, text: str) -> list[int]:
        """Token ids of a context: the rendered conversation and the answer, as one text.
        A plain transcript starts with the model's BOS token."""
        return self.tokenize(text, bos=self.template.plain)

    def decode(self, tokens: list[int]) -> str:
        return self.detokenize(tokens)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """Text of the tokens (llama-cpp-python's own cuts pieces longer than 32 bytes)."""
        array = (llama_cpp.llama_token * len(tokens))(*tokens)

        def into(size: int) -> tuple[ctypes.Array[ctypes.c_char], int]:
            buffer = ctypes.create_string_buffer(size)
            vocab = self.llm._model.vocab
            return buffer, llama_cpp.llama_detokenize(
                vocab, array, len(tokens), buffer, size, False, special
            )

        buffer, length = into(16 * len(tokens) + 16)
        if length < 0:  # the buffer was short by that much
            buffer, length = into(-length)
        return buffer.raw[:length].decode("utf-8", errors="replace")

    async def count(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        return len(self.encode(self.template.render(messages, tools)))

    async def count_text(self, text: str) -> int:
        return len(self.tokenize(text, special=False))

    async def open(
        self, messages: Sequence[Message], tools: Sequence[Tool] = (), answer: str | None = None
    ) -> LlamaCppSession:
        """Start a request; its prompt is read by its first draft or verification."""
        session = LlamaCppSession(self, self.template.render(messages, tools))
        holds = f"whose context holds {self.context_tokens}"
        check_prompt(self.name, session.prompt_tokens, self.context_tokens - 1, holds)
        if self.batcher is not None:
            session.slot = await self.batcher.slot()
            session.executor = self.batcher.executor
        return session

    # -- the KV cache ------------------------------------------------------------------

    @contextmanager
    def held(self, session: LlamaCppSession) -> Iterator[None]:
        """Hold the model for one call of ``session``: its lock, its KV cache (see
        :meth:`take`) and a share of the cores. A batching model's sessions have sequences
        of their own and hold nothing."""
        if self.batcher is not None:
            yield
            return
        with self.lock, _cores.share():
            self.take(session)
            yield

    def take(self, session: LlamaCppSession) -> None:
        """Give the cache to ``session``: save the owner's state, restore the session's. A
        new session gets the cache as it is; its first read keeps what it may share (see
        :meth:`logits`). Call with :attr:`lock` held."""
        if self.owner is session:
            return
        ctx = self.llm.ctx
        if self.owner is not None and self.owner.started:
            state = (ctypes.c_uint8 * llama_cpp.llama_state_seq_get_size(ctx, 0))()
            llama_cpp.llama_state_seq_get_data(ctx, state, len(state), 0)
            self.owner.saved = SavedState(list(self.cached), self.whole, state)
        saved, session.saved = session.saved, None
        if saved is not None:
            self.llm._ctx.kv_cache_clear()
            if not llama_cpp.llama_state_seq_set_data(ctx, saved.state, len(saved.state), 0):
                self.cached, self.whole = [], 0
                raise RuntimeError("llama.cpp could not restore a saved KV cache")
            self.cached, self.whole = saved.tokens, saved.whole
        self.owner = session

    def release(self, session: LlamaCppSession) -> None:
        if session.slot is not None:
            session.slot.release()
            return
        with self.lock:
            session.saved = None
            if self.owner is session:
                self.owner = None

    def logits(self, session: LlamaCppSession, ids: Sequence[int], first: int) -> Logits:
        """Bring ``session``'s KV cache to ``ids``; return the logits at positions
        ``first`` onwards.

        Reads only the tokens after the common prefix of the cache and ``ids`` (and those
        from ``first`` on, to get their logits). Call inside :meth:`held`.
        """
        if session.slot is not None:
            return session.slot.logits(ids, first)
        keep = min(common_prefix(self.cached, ids), first)
        if not session.started:  # another request's cache: keep the whole chunks it shares
            keep = min(keep, self.whole) // CHUNK * CHUNK
            session.started = True
        try:
            if not self.llm._ctx.kv_cache_seq_rm(-1, keep, -1):
                raise RuntimeError("llama.cpp could not drop the end of its KV cache")
            del self.cached[keep:]
            self.whole = min(self.whole, keep) // CHUNK * CHUNK
            self._read_context(ids[keep:first])
            return self._read(ids[first:], outputs=True)
        except BaseException:
            self.llm._ctx.kv_cache_clear()
            self.cached, self.whole = [], 0
            raise

    def _read_context(self, tokens: Sequence[int]) -> None:
        """Append tokens whose logits are not needed. Read after the cache's whole chunks,
        they are read in whole chunks as far as they go."""
        if len(self.cached) == self.whole:
            whole = len(tokens) - len(tokens) % CHUNK
            for start in range(0, whole, CHUNK):
                self._read(tokens[start : start + CHUNK], outputs=False)
                self.whole += CHUNK
            tokens = tokens[whole:]
        self._read(tokens, outputs=False)

    def _read(self, tokens: Sequence[int], *, outputs: bool) -> Logits:
        """Append ``tokens`` to the cache; return their logits if ``outputs``."""
        rows: list[Logits] = []
        n_vocab = self.llm.n_vocab()
        for start in range(0, len(tokens), self.llm.n_batch):
            chunk = list(tokens[start : start + self.llm.n_batch])
            llama_cpp.llama_set_n_threads(self.llm.ctx, _cores.threads(), THREADS)
            self.llm._batch.set_batch(chunk, n_past=len(self.cached), logits_all=outputs)
            self.llm._ctx.decode(self.llm._batch)
            self.cached.extend(chunk)
            if outputs:
                logits = self.llm._ctx.get_logits()
                rows.append(np.ctypeslib.as_array(logits, shape=(len(chunk), n_vocab)).copy())
        return np.concatenate(rows) if rows else np.empty((0, n_vocab), np.float32)


@dataclass(frozen=True)
class SavedState:
    """A session's KV cache while another session uses it."""

    tokens: list[int]
    whole: int
    state: ctypes.Array[ctypes.c_uint8]


class TokenSampler(Sampler[Logits]):
    """Samples tokens from logits as a draft does: the repetition penalty over the latest
    tokens (``history`` and those sampled since), then temperature and top-p, seeded."""

    def __init__(
        self, n_vocab: int, sampling: Sampling, seed: int, history: Sequence[int] = ()
    ) -> None:
        self.chain = LlamaSampler()
        if sampling.repeat_penalty != 1.0:
            self.chain.add_penalties(n_vocab, REPEAT_LAST_N, sampling.repeat_penalty, 0.0, 0.0)
        if sampling.temperature == 0:
            self.chain.add_greedy()
        else:
            self.chain.add_temp(sampling.temperature)
            if sampling.top_p < 1.0:
                self.chain.add_top_p(sampling.top_p, 1)
            self.chain.add_dist(seed)
        for token in history[-REPEAT_LAST_N:]:
            llama_cpp.llama_sampler_accept(self.chain.sampler, token)
        self.array = LlamaTokenDataArray(n_vocab=n_vocab)

    def pick(self, logits: Logits, among: Sequence[int] | None = None) -> int:
        if among is not None:
            only = np.full_like(logits, -np.inf)
            only[among] = logits[among]
            logits = only
        self.array.copy_logits(logits)
        candidates = self.array.candidates
        llama_cpp.llama_sampler_apply(self.chain.sampler, ctypes.byref(candidates))
        return int(candidates.data[candidates.selected].id)

    def take(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.chain.sampler, token)

    def likeliest(self, logits: Logits, most: int) -> list[int]:
        top = np.argpartition(-logits, min(most, len(logits) - 1))[:most]
        return top[np.argsort(-logits[top], kind="stable")].tolist()


class LlamaCppSession(LocalSession):
    """One request's state for one llama.cpp member: its token context."""

    backend: LlamaCppBackend
    runs_on = "llamacpp"

    def __init__(self, backend: LlamaCppBackend, prompt: str) -> None:
        super().__init__(backend, prompt)
        self.saved: SavedState | None = None
        self.started = False
        """Whether its calls have read into the cache (until then it holds what an
        earlier request left)."""
        self.slot: Slot | None = None
        """Its sequence in a batching model's context."""
        self.drafted: list[tuple[list[int], Logits]] = []
        """This round's drafts: the tokens of each and the logits each token was sampled
        from (one row more when it ended the turn). A candidate that starts as a draft does
        is scored from these rows instead of being read again."""

    async def accept(self, segment: Segment) -> int:
        """Append the segment to the context; the next call reads it into the cache."""
        self.drafted = []
        return self._grow(segment)[1]

    async def aclose(self) -> None:
        await asyncio.to_thread(self.backend.release, self)

    def _draft(
        self, window: int, sampling: Sampling, seed: int, run_on: bool, fits: Fits | None
    ) -> Draft:
        backend = self.backend
        rows: list[Logits] = []  # the logits of each position drafted from

        def step(tokens: list[int]) -> Logits:
            context = self.ids + tokens
            rows.append(backend.logits(self, context, len(context) - 1)[0])
            return rows[-1]

        with backend.held(self):
            tokens, finished, at_boundary = draft_tokens(
                step([]),
                step,
                TokenSampler(backend.llm.n_vocab(), sampling, seed, self.ids),
                end_of_turn=backend.end_of_turn,
                decode=self._decode,
                window=window,
                room=backend.context_tokens - len(self.ids),
                run_on=run_on,
                fits=fits,
            )
        self.drafted.append((tokens, np.stack(rows)))
        return self._finish(tokens, finished, at_boundary)

    def _score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[Score]:
        spans = [self._candidate(c) for c in candidates]
        scores = []
        with self.backend.held(self):
            for start, seq in spans:
                logits = self._drafted_logits(start, seq)
                if logits is None:
                    # The logits from the token before the candidate on predict the
                    # candidate's tokens; its last token predicts nothing and is not read.
                    logits = self.backend.logits(self, self.ids[:start] + seq[:-1], start - 1)
                scores.append(token_score(logits, seq, scoring))
        return scores

    def _drafted_logits(self, start: int, seq: list[int]) -> Logits | None:
        """A draft's logits that predict ``seq``, if it starts after the context and all
        but its last token are that draft's first tokens (as for this member's own
        candidates, whole or cut)."""
        if start != len(self.ids):
            return None
        for tokens, rows in self.drafted:
            if len(seq) <= len(rows) and seq[:-1] == tokens[: len(seq) - 1]:
                return rows[: len(seq)]
        return None


def token_score(logits: Logits, targets: Sequence[int], scoring: Scoring) -> Score:
    """The score of ``targets``, each token's log-probability (or raw logit) under
    ``logits[i]``."""
    rows = logits.astype(np.float64)
    picked = rows[np.arange(len(targets)), targets]
    if scoring == "mean_logprob":
        top = rows.max(axis=1)
        picked = picked - top - np.log(np.exp(rows - top[:, None]).sum(axis=1))
    return Score.of(picked.tolist())
