"""Admission control and the answer's time limit: answers in progress are bounded, the
queue behind them too, the excess is a 429 at once; a queued request whose client leaves
costs nothing; ``/ready`` stays 200 while the queue is full; an answer past its time ends
with a 504 (or a stream's error event) and its members stop. The slow member is the TGI test
server made to wait before each answer (a fault at the transport boundary)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from openai_server_harness import serve
from specem_chain import RequestSettings

from specem_openai_server.admission import Admission
from specem_openai_server.errors import APIError
from specem_openai_server.limits import Limits

HI = [{"role": "user", "content": "Hi"}]


async def test_slots_then_a_bounded_queue_then_429s_first_come_first_served():
    admission = Admission(concurrent=1, queue=2)
    never = asyncio.get_running_loop().create_future()  # a client that stays
    assert await admission.enter(never)
    second = asyncio.create_task(admission.enter(never))
    third = asyncio.create_task(admission.enter(never))
    await asyncio.sleep(0)
    with pytest.raises(APIError) as refused:
        await admission.enter(never)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    assert refused.value.body.error.code == "overloaded"
    assert not second.done() and not third.done()
    admission.leave()
    assert await second and not third.done()  # the slot passed on, in order
    admission.leave()
    assert await third
    admission.leave()
    assert admission.running == 0 and not admission.waiting


async def test_a_queued_client_that_leaves_is_dropped_and_the_next_one_gets_the_slot():
    admission = Admission(concurrent=1, queue=2)
    loop = asyncio.get_running_loop()
    stays, leaves = loop.create_future(), loop.create_future()
    assert await admission.enter(stays)
    gone = asyncio.create_task(admission.enter(leaves))
    waits = asyncio.create_task(admission.enter(stays))
    await asyncio.sleep(0)
    leaves.set_result({"type": "http.disconnect"})
    assert await gone is False
    assert len(admission.waiting) == 1
    admission.leave()
    assert await waits
    admission.leave()
    assert admission.running == 0


def metric(base: str, name: str) -> float:
    lines = httpx.get(f"{base}/metrics").text.splitlines()
    return sum(
        float(x.split()[-1]) for x in lines if x.startswith(name + " ") or x.startswith(name + "{")
    )


async def test_past_the_slots_and_the_queue_requests_get_429_at_once(slow_member):
    limits = Limits(max_concurrent_requests=1, max_queue=1)
    with serve([slow_member], RequestSettings(max_tokens=24), limits=limits) as base:
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            ask = {"messages": HI, "seed": 0}
            first = asyncio.create_task(client.post("/v1/chat/completions", json=ask))
            await until(lambda: metric(base, "specem_requests_in_progress") == 1)
            second = asyncio.create_task(client.post("/v1/chat/completions", json=ask))
            await until(lambda: metric(base, "specem_requests_queued") == 1)
            started = time.perf_counter()
            third = await client.post("/v1/chat/completions", json={**ask, "stream": True})
            refused_s = time.perf_counter() - started
            assert third.status_code == 429 and third.headers["retry-after"] == "1"
            assert third.json()["error"]["code"] == "overloaded"
            assert (await client.get("/ready")).status_code == 200  # full is not unready
            answers = await asyncio.gather(first, second)
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json()["choices"][0]["message"]["content"] is not None
    print(f"the 429 came in {refused_s * 1000:.1f} ms while an answer ran")


async def test_a_queued_request_whose_client_leaves_costs_nothing(slow_member):
    limits = Limits(max_concurrent_requests=1, max_queue=2)
    with serve([slow_member], RequestSettings(max_tokens=24), limits=limits) as base:
        # the metrics are the test process's, shared by every server it starts
        counted = ("specem_requests_total", "specem_queue_seconds_count")
        before = [metric(base, name) for name in counted]
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            first = asyncio.create_task(client.post("/v1/chat/completions", json={"messages": HI}))
            await until(lambda: metric(base, "specem_requests_in_progress") == 1)
            async with httpx.AsyncClient(base_url=base, timeout=0.3) as impatient:
                with pytest.raises(httpx.ReadTimeout):
                    await impatient.post("/v1/chat/completions", json={"messages": HI})
            await until(lambda: metric(base, "specem_requests_queued") == 0)
            assert (await first).status_code == 200
            await until(lambda: metric(base, "specem_requests_in_progress") == 0)
        # one answer, one queue wait; the request that left never became a chat completion
        assert [metric(base, name) - b for name, b in zip(counted, before)] == [1, 1]


async def test_an_answer_past_its_time_is_a_504_and_its_rounds_stop(slow_member):
    settings = RequestSettings(max_tokens=64, answer_timeout=1.0)
    with serve([slow_member], settings) as base:
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            plain = await client.post("/v1/chat/completions", json={"messages": HI})
            assert plain.status_code == 504, plain.text
            error = plain.json()["error"]
            assert error["code"] == "timeout" and "answer_timeout=1.0" in error["message"]
            streamed = await client.post(
                "/v1/chat/completions", json={"messages": HI, "stream": True}
            )
            events = [e for e in streamed.text.split("\n\n") if e.startswith("data: ")]
            assert '"code":"timeout"' in events[-1].replace(" ", "") and "[DONE]" not in events[-1]
            rounds = metric(base, "specem_rounds_total")
            await asyncio.sleep(1.5)  # a round left running would end by now
            assert metric(base, "specem_rounds_total") == rounds
            assert metric(base, 'specem_requests_total{outcome="timeout"}') >= 2


async def until(done, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)
