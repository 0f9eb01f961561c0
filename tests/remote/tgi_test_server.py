"""The TGI test server: a small server that speaks TGI's protocol, backed by an in-process
transformers model, for the tests of TGI members (TGI itself cannot run on the test
machines). A test double, not a feature: users run TGI, or vLLM or llama.cpp's server.

    python tests/remote/tgi_test_server.py MEMBER [--host H] [--port P] [--no-prefill-logprobs]

It implements what SpecEM needs of TGI's OpenAPI schema (``tgi_protocol/``): ``GET
/health``, ``GET /info``, ``POST /tokenize``, ``POST /chat_tokenize`` and ``POST /generate``
(sampling with a seed, the repetition penalty, stop sequences, ``details`` and
``decoder_input_details``), and ``GET /metrics`` with TGI's own ``tgi_request_count`` (the
``/generate`` requests received). Requests run one at a time. ``prefill_logprobs=False``
answers prefill log-probs with null, as TGI v3 does when started without
``--enable-prefill-logprobs``; ``delay`` makes each ``/generate`` wait that many seconds
before it is answered (a slow server, for tests of time limits and admission).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import threading
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from transformers import DynamicCache
from transformers.generation import RepetitionPenaltyLogitsProcessor

from specem_chain.backends.transformers import TransformersBackend
from specem_chain.members import Member
from specem_chain.models import resolve


class Parameters(BaseModel):
    """The part of TGI's GenerateParameters this server implements; others are ignored."""

    model_config = ConfigDict(extra="ignore")

    do_sample: bool = False
    temperature: float | None = Field(None, gt=0)
    top_p: float | None = Field(None, gt=0, lt=1)
    repetition_penalty: float | None = Field(None, gt=0)
    max_new_tokens: int | None = Field(None, ge=0)
    seed: int | None = Field(None, gt=0)
    stop: list[str] = Field(default_factory=list, max_length=4)
    details: bool = True
    decoder_input_details: bool = False


class GenerateRequest(BaseModel):
    inputs: str
    parameters: Parameters = Parameters()


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    inputs: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.get("text", "") for part in self.content)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    messages: list[ChatMessage]


class ServerError(Exception):
    """An error answer in TGI's ErrorResponse shape."""

    def __init__(self, status: int, message: str, error_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


class Generator:
    """Generation and tokenisation on one loaded model, one request at a time."""

    def __init__(self, backend: TransformersBackend, *, prefill_logprobs: bool) -> None:
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.prefill_logprobs = prefill_logprobs
        self.special = set(self.tokenizer.all_special_ids)
        self.lock = threading.Lock()

    def tokenize(self, text: str) -> list[dict[str, Any]]:
        encoding = self.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        return [
            {
                "id": token,
                "text": text[start:stop] or self.tokenizer.convert_ids_to_tokens(token),
                "start": start,
                "stop": stop,
            }
            for token, (start, stop) in zip(encoding["input_ids"], encoding["offset_mapping"])
        ]

    def chat_tokenize(self, request: ChatRequest) -> dict[str, Any]:
        messages = [{"role": m.role, "content": m.text()} for m in request.messages]
        if not self.tokenizer.chat_template:
            raise ServerError(422, "the model has no chat template", "template_error")
        try:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as error:  # jinja raises on a role the template does not accept
            raise ServerError(422, f"chat template error: {error}", "template_error") from None
        return {"templated_text": text, "tokenize_response": self.tokenize(text)}

    def info(self) -> dict[str, Any]:
        context = self.backend.context_tokens
        return {
            "model_id": self.backend.name,
            "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": 128,
            "max_best_of": 1,
            "max_stop_sequences": 4,
            "max_input_tokens": context - 1,
            "max_total_tokens": context,
            "validation_workers": 1,
            "max_client_batch_size": 1,
            "router": "specem-tgi-test-server",
            "version": version("specem-chain"),
        }

    def _token(self, token: int, logprob: float | None) -> dict[str, Any]:
        return {"id": token, "text": self.tokenizer.decode([token]), "logprob": logprob}

    @torch.inference_mode()
    def generate(self, request: GenerateRequest) -> dict[str, Any]:
        p = request.parameters
        ids = self.tokenizer.encode(request.inputs, add_special_tokens=True)
        room = self.backend.context_tokens - len(ids)
        if not ids or room <= 0:
            raise ServerError(
                422, f"inputs must have 1 to {self.backend.context_tokens - 1} tokens", "validation"
            )
        max_new = min(room, 100 if p.max_new_tokens is None else p.max_new_tokens)
        seed = p.seed if p.seed is not None else random.randrange(1, 2**63)
        with self.lock:
            cache = DynamicCache()
            logits = self._forward(ids, cache)
            prefill = []
            if p.decoder_input_details:
                logprobs = torch.log_softmax(logits[:-1], dim=-1)
                targets = torch.tensor(ids[1:])
                values = logprobs.gather(1, targets[:, None])[:, 0].tolist()
                known = values if self.prefill_logprobs else [None] * len(values)
                prefill = [self._token(ids[0], None)]
                prefill += [self._token(t, v) for t, v in zip(ids[1:], known)]
            tokens, finish = self._sample(ids, cache, logits[-1], p, max_new, seed)
        text, finish = self._text(ids, tokens, p.stop, finish)
        response: dict[str, Any] = {"generated_text": text}
        if p.details:
            response["details"] = {
                "finish_reason": finish,
                "generated_tokens": len(tokens),
                "prefill": prefill,
                "seed": seed if p.do_sample else None,
                "tokens": tokens,
            }
        return response

    def _forward(self, ids: list[int], cache: DynamicCache) -> torch.Tensor:
        start = cache.get_seq_length()
        out = self.backend.model(
            input_ids=torch.tensor([ids]),
            position_ids=torch.arange(start, start + len(ids))[None],
            cache=cache,
            use_cache=True,
        )
        return out.logits[0].float()

    def _sample(
        self,
        ids: list[int],
        cache: DynamicCache,
        logits: torch.Tensor,
        p: Parameters,
        max_new: int,
        seed: int,
    ) -> tuple[list[dict[str, Any]], str]:
        generator = torch.Generator().manual_seed(seed)
        tokens: list[dict[str, Any]] = []
        for _ in range(max_new):
            logprobs = torch.log_softmax(logits, dim=-1)
            token = _choose(logits, p, generator, ids + [t["id"] for t in tokens])
            tokens.append(
                {**self._token(token, logprobs[token].item()), "special": token in self.special}
            )
            if token in self.backend.end_of_turn:
                return tokens, "eos_token"
            if p.stop and any(s in self._text(ids, tokens, (), "")[0] for s in p.stop):
                return tokens, "stop_sequence"
            if len(tokens) < max_new:
                logits = self._forward([token], cache)[-1]
        return tokens, "length"

    def _text(
        self, ids: list[int], tokens: list[dict[str, Any]], stop: Sequence[str], finish: str
    ) -> tuple[str, str]:
        """The generated text as it reads after the input (TGI decodes with the input's last
        token as prefix, so a leading space survives), cut after a stop sequence."""
        anchor = ids[-1:]
        new = [t["id"] for t in tokens]
        head = self.tokenizer.decode(anchor, skip_special_tokens=True)
        text = self.tokenizer.decode(anchor + new, skip_special_tokens=True)[len(head) :]
        hits = [(i, s) for s in stop if (i := text.find(s)) != -1]
        if hits:
            at, hit = min(hits)
            return text[: at + len(hit)], "stop_sequence"
        return text, finish


def _choose(
    logits: torch.Tensor, p: Parameters, generator: torch.Generator, sequence: list[int]
) -> int:
    """The next token after ``sequence`` (the input and the tokens generated so far): the
    repetition penalty over the whole sequence, as TGI applies it, then greedy, or sampled
    with temperature and top-p."""
    if p.repetition_penalty is not None:
        penalty = RepetitionPenaltyLogitsProcessor(p.repetition_penalty)
        logits = penalty(torch.tensor([sequence]), logits[None])[0]
    if not p.do_sample:
        return int(logits.argmax())
    scaled = logits / (p.temperature or 1.0)
    probs = torch.softmax(scaled, dim=-1)
    if p.top_p is not None:
        ordered, order = probs.sort(descending=True)
        before = ordered.cumsum(0) - ordered
        ordered[before > p.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator))


def create_app(member: Member, *, prefill_logprobs: bool = True, delay: float = 0) -> FastAPI:
    """The FastAPI app serving ``member`` (a local member spec) over TGI's protocol, on
    transformers: a built-in model loads from its converted folder (about a second), not
    from its GGUF, which transformers reads in 20-40 s."""
    local = TransformersBackend.load(resolve(member.model_copy(update={"backend": "transformers"})))
    generator = Generator(local, prefill_logprobs=prefill_logprobs)
    app = FastAPI(title="specem TGI test server", version=version("specem-chain"))
    received = {"generate": 0}

    @app.exception_handler(ServerError)
    async def _server_error(_: Request, error: ServerError) -> JSONResponse:
        body = {"error": str(error), "error_type": error.error_type}
        return JSONResponse(body, status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        body = {"error": f"Input validation error: {error.errors()}", "error_type": "validation"}
        return JSONResponse(body, status_code=422)

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200)

    @app.get("/info")
    def info() -> dict[str, Any]:
        return generator.info()

    @app.post("/tokenize")
    def tokenize(request: TokenizeRequest) -> list[dict[str, Any]]:
        return generator.tokenize(request.inputs)

    @app.post("/chat_tokenize")
    def chat_tokenize(request: ChatRequest) -> dict[str, Any]:
        return generator.chat_tokenize(request)

    @app.post("/generate")
    async def generate(request: GenerateRequest) -> dict[str, Any]:
        received["generate"] += 1
        await asyncio.sleep(delay)
        return await run_in_threadpool(generator.generate, request)

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            f"# TYPE tgi_request_count counter\ntgi_request_count {received['generate']}\n"
        )

    return app


def main() -> None:
    """Serve a member until interrupted."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("member", help="a local member: built-in name, folder, .gguf")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--no-prefill-logprobs",
        dest="prefill_logprobs",
        action="store_false",
        help="answer prefill log-probs with null, as TGI v3 without --enable-prefill-logprobs",
    )
    parser.add_argument(
        "--delay", type=float, default=0, help="seconds each /generate waits before its answer"
    )
    args = parser.parse_args()
    app = create_app(
        Member(source=args.member), prefill_logprobs=args.prefill_logprobs, delay=args.delay
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
