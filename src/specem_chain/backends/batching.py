"""Continuous batching for llama.cpp members: the reads of every live request on one model
(each request a sequence in one llama.cpp context), gathered into one batch per step.

A step that reads the draft tokens of several requests at once reads the weights once for
all of them. A request joins at the next step and leaves by freeing its sequence; a long
read (a new request's prompt) is cut into chunks, so the others keep stepping while it is
read. Between two steps each request samples its next token from the last step's logits;
the scheduler waits up to :data:`GATHER` for the requests of the last step to come back,
so that they keep stepping together instead of drifting into alternate steps.

llama.cpp's numbers for a token depend slightly on what else is in its batch, so answers
under batching may differ from the same answers made alone: batching is a member setting
(``Member(batching=True)``), off by default; ``specem serve`` turns it on.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp._internals import LlamaContext
from llama_cpp._utils import suppress_stdout_stderr

from .drafting import common_prefix

Logits = npt.NDArray[np.float32]

SEQUENCES = 8
"""Requests one model serves at once; more wait for a free sequence."""

CHUNK = 64
"""Tokens of a long read that join a step while other requests are stepping."""

GATHER = 0.003
"""Seconds a step waits for the reads of the sequences in the step before it (each request
samples its token in between): far less than a step of the built-in members (7-90 ms)."""


class Cores(Protocol):
    """The process's cores, shared by the models reading at one time."""

    def share(self) -> AbstractContextManager[None]: ...

    def threads(self) -> int: ...


@dataclass
class Read:
    """One request's read: tokens appended to its sequence from position ``start``, the
    logits wanted from token ``first`` of them on."""

    slot: Slot
    start: int
    tokens: list[int]
    first: int
    begun: bool = False
    """Its sequence's tail from ``start`` on is dropped (done at its first step)."""
    done: int = 0
    rows: list[Logits] = field(default_factory=list)
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)


class Slot:
    """One request's sequence in a batching model's context, and the tokens it holds."""

    def __init__(self, batcher: Batcher, seq: int) -> None:
        self.batcher = batcher
        self.seq = seq
        self.cached: list[int] = []
        self.released = False

    def logits(self, ids: Sequence[int], first: int) -> Logits:
        """Bring the sequence to ``ids``; return the logits at positions ``first`` onwards
        (reading only what follows the common prefix of the sequence and ``ids``)."""
        keep = min(common_prefix(self.cached, ids), first)
        try:
            rows = self.batcher.read(Read(self, keep, list(ids[keep:]), first - keep))
        except BaseException:
            self.cached = []  # the next read starts the sequence again
            raise
        self.cached = list(ids)
        return rows

    def release(self) -> None:
        self.batcher.release(self)


class Batcher:
    """A llama.cpp context of :data:`SEQUENCES` sequences and the thread that decodes their
    reads together (see the module)."""

    def __init__(self, llm: llama_cpp.Llama, context: int, cores: Cores, threads: int) -> None:
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = context
        params.n_seq_max = SEQUENCES
        params.kv_unified = True
        with suppress_stdout_stderr(disable=False):  # its note that n_ctx > n_ctx_train
            self.ctx = LlamaContext(model=llm._model, params=params, verbose=False)
        self.n_batch = int(params.n_batch)
        self.n_vocab = llm.n_vocab()
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.cores = cores
        self.all_threads = threads
        self.executor = ThreadPoolExecutor(SEQUENCES, thread_name_prefix="specem-sequence")
        """Runs the sessions' calls: one a sequence, whatever the event loop's own pool."""
        self.free = list(range(SEQUENCES))
        self.waiting: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self.pending: deque[Read] = deque()
        self.cleared: list[int] = []
        self.stepped: set[int] = set()
        """The sequences in the last step, not released since: the next step waits (up to
        :data:`GATHER`) for their reads."""
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="specem-batcher", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop the decoding thread, then free the context (no request may be running)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join()
        self.executor.shutdown()
        llama_cpp.llama_batch_free(self.batch)
        self.ctx.close()

    # -- sequences ---------------------------------------------------------------------

    async def slot(self) -> Slot:
        """A free sequence for a new request; waits (first come, first served) while every
        one is taken."""
        loop = asyncio.get_running_loop()
        while True:
            with self.cond:
                if self.free and not self.waiting:
                    return Slot(self, self.free.pop(0))
                turn: asyncio.Future[None] = loop.create_future()
                self.waiting.append((loop, turn))
            try:
                await turn
            except BaseException:
                with self.cond:
                    if (loop, turn) in self.waiting:
                        self.waiting.remove((loop, turn))
                    elif turn.done() and not turn.cancelled():
                        self._wake()  # pass the turn on
                raise
            with self.cond:
                if self.free:
                    return Slot(self, self.free.pop(0))

    def release(self, slot: Slot) -> None:
        """Free a request's sequence: its pending reads fail, its cells are cleared before
        the next step."""
        with self.cond:
            if slot.released:
                return
            slot.released = True
            for item in [item for item in self.pending if item.slot is slot]:
                item.error = RuntimeError("the request ended while its read was waiting")
                self._finish(item)
            self.cleared.append(slot.seq)
            self.stepped.discard(slot.seq)
            self.cond.notify_all()

    def _wake(self) -> None:
        """Give the next waiting request its turn (call with :attr:`cond` held)."""
        while self.waiting:
            loop, turn = self.waiting.popleft()
            if not turn.done():
                loop.call_soon_threadsafe(_set, turn)
                return

    # -- reads -------------------------------------------------------------------------

    def read(self, item: Read) -> Logits:
        """Append ``item.tokens`` to its sequence from position ``item.start`` (dropping
        what the sequence held from there on); return the logits of
        ``item.tokens[item.first:]``."""
        with self.cond:
            if item.slot.released:
                raise RuntimeError("the request's sequence was released")
            self.pending.append(item)
            self.cond.notify_all()
        item.finished.wait()
        if item.error is not None:
            raise item.error
        return np.concatenate(item.rows) if item.rows else np.empty((0, self.n_vocab), np.float32)

    def _loop(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.pending or self.cleared or self.closed)
                if self.closed:
                    return
                self.cond.wait_for(lambda: self.cleared or self._gathered(), timeout=GATHER)
                cleared, self.cleared = self.cleared, []
                items = list(self.pending)
            for seq in cleared:
                llama_cpp.llama_memory_seq_rm(self.ctx.memory, seq, 0, -1)
                with self.cond:
                    self.free.append(seq)
                    self._wake()
            if items:
                self._step(items)

    def _gathered(self) -> bool:
        """Every sequence of the last step has its next read pending (call with
        :attr:`cond` held)."""
        return self.stepped <= {item.slot.seq for item in self.pending}

    def _step(self, items: list[Read]) -> None:
        """One decode over a share of every pending read; finished reads leave."""
        for item in items:
            if not item.begun:  # a new read drops what its sequence held from its start on
                llama_cpp.llama_memory_seq_rm(self.ctx.memory, item.slot.seq, item.start, -1)
                item.begun = True
                if not item.tokens:
                    self._finish(item)
        items = [item for item in items if item.tokens and not item.slot.released]
        chunk = self.n_batch if len(items) == 1 else CHUNK
        taken: list[tuple[Read, int, int]] = []  # item, first batch index, tokens
        used = 0
        for item in items:
            size = min(len(item.tokens) - item.done, chunk, self.n_batch - used)
            if size <= 0:
                continue
            taken.append((item, used, size))
            used += size
        self._fill(taken)
        with self.cond:
            self.stepped = {item.slot.seq for item, _, _ in taken if not item.slot.released}
        try:
            with self.cores.share():
                # one token a sequence: a share of the cores; more: every core (see Cores)
                steps = all(size == 1 for _, _, size in taken)
                threads = self.cores.threads() if steps else self.all_threads
                llama_cpp.llama_set_n_threads(self.ctx.ctx, threads, self.all_threads)
                failed = llama_cpp.llama_decode(self.ctx.ctx, self.batch) != 0
            if failed:
                raise RuntimeError(
                    "llama.cpp found no room for this step in its KV cache; lower the "
                    "number of concurrent requests or their length"
                )
            self._collect(taken)
        except BaseException as error:  # every read in the step fails with it
            for item, _, _ in taken:
                item.error = error
                self._finish(item)

    def _fill(self, taken: list[tuple[Read, int, int]]) -> None:
        batch = self.batch
        batch.n_tokens = sum(size for _, _, size in taken)
        for item, offset, size in taken:
            position = item.start + item.done
            for k in range(size):
                i = offset + k
                batch.token[i] = item.tokens[item.done + k]
                batch.pos[i] = position + k
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = item.slot.seq
                batch.logits[i] = item.done + k >= item.first

    def _collect(self, taken: list[tuple[Read, int, int]]) -> None:
        for item, offset, size in taken:
            out = [k for k in range(size) if item.done + k >= item.first]
            if out:
                rows = np.empty((len(out), self.n_vocab), np.float32)
                for row, k in enumerate(out):
                    pointer = llama_cpp.llama_get_logits_ith(self.ctx.ctx, offset + k)
                    rows[row] = np.ctypeslib.as_array(
                        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)),
                        shape=(self.n_vocab,),
                    )
                item.rows.append(rows)
            item.done += size
            if item.done == len(item.tokens):
                self._finish(item)

    def _finish(self, item: Read) -> None:
        with self.cond:
            if item in self.pending:
                self.pending.remove(item)
        item.finished.set()


def _set(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)
