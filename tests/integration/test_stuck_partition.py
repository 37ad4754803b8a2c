"""A partition held stuck on purpose is visible: lag, the stuck-commit metric, /readyz.

The worker is `build_worker`'s, with its processor wrapped so that the batch holding one
request waits until the test releases it; later records of the same partition (same key,
another voice) are answered meanwhile, so the partition's committed offset stays at the
held record while its end moves on. This process never commits that partition, which is
exactly the case that used to have no `vf_consumer_lag` series. Everything is read from the
worker's own HTTP endpoints, as Prometheus and the kubelet read them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, cast

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from consumers.settings import Settings
from consumers.wiring import build_worker
from pipeline.synthesis import Outcome, Received, RequestProcessor
from tests.integration.workers import wait_for_answers
from topics.events import SynthesisRequest, encode
from topics.partitioning import partition_for
from topics.specs import topic_names

pytestmark = pytest.mark.integration

STUCK_AFTER_S = 2  # VF_STUCK_PARTITION_SECONDS for this test
LATER = 3  # records behind the held one on its partition


class HoldOne:
    """The real processor, except that the batch holding `request_id` waits for release()."""

    def __init__(self, inner: RequestProcessor, request_id: str) -> None:
        self._inner = inner
        self._request_id = request_id
        self._release = threading.Event()
        self.holding = threading.Event()

    @property
    def answers(self) -> Any:
        return self._inner.answers

    def store_reachable(self) -> bool:
        return self._inner.store_reachable()

    def process_batch(self, items: list[tuple[SynthesisRequest, Received]]) -> list[Outcome]:
        if any(request.request_id == self._request_id for request, _ in items):
            self.holding.set()
            self._release.wait(120)  # bounded: a failed test must not hang a thread forever
        return self._inner.process_batch(items)

    def release(self) -> None:
        self._release.set()


def metric_samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def test_a_held_partition_shows_in_lag_the_stuck_metric_and_readyz(
        settings: Settings) -> None:
    # max_batch 1: the later records are other voices, which an engine that mixes voices
    # (the bench engine) would otherwise take into the held record's call.
    settings = settings.with_overrides(worker={"stuck_partition_seconds": STUCK_AFTER_S,
                                               "drain_seconds": 5, "max_batch": 1})
    names = topic_names(settings.kafka.topic_prefix)
    tag = uuid.uuid4().hex[:8]
    key = f"held-{tag}"
    partition = partition_for(key, 12)
    held = SynthesisRequest(request_id=f"held-{tag}", voice_id=key, text="Held on purpose.")
    # Same key (so the same partition), other voices (so other batches): answered
    # `rejected` (voice_not_found) by the real processor while the held one waits.
    later = [SynthesisRequest(request_id=f"later-{tag}-{i}", voice_id=f"later-{tag}-{i}",
                              text="Answered behind the held record.") for i in range(LATER)]

    runtime = build_worker(settings, retry_base_s=0.05)
    worker = runtime.worker
    processor = HoldOne(runtime.processor, held.request_id)
    worker._processor = cast(RequestProcessor, processor)
    task = asyncio.create_task(worker.run())
    try:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
        await producer.start()
        try:
            for request in (held, *later):
                meta = await producer.send_and_wait(names.requests, encode(request),
                                                    key=key.encode())
                assert meta.partition == partition
        finally:
            await producer.stop()
        produced = time.monotonic()
        answered = await wait_for_answers(settings, {r.request_id for r in later}, 60)
        assert {r.status for r in answered if r.request_id.startswith("later-")} == {"rejected"}
        assert processor.holding.is_set()
        assert worker.health is not None
        series = (("partition", str(partition)), ("topic", names.requests))

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{worker.health.port}",
                                     timeout=5.0) as http:
            # Within 30 s of the records being produced: lag, stall and /readyz all say so.
            seen: dict[str, object] = {}
            while time.monotonic() - produced < 30:
                text = (await http.get("/metrics")).text
                seen = {"lag": metric_samples(text, "vf_consumer_lag").get(series),
                        "stalled": metric_samples(
                            text, "vf_partition_commit_stalled_seconds").get(series),
                        "stuck": metric_samples(text, "vf_partitions_stuck").get(())}
                if seen["stuck"] == 1:
                    break
                await asyncio.sleep(0.5)
            took = time.monotonic() - produced
            assert seen["stuck"] == 1, f"not reported stuck within 30 s: {seen}"
            assert seen["lag"] == 1 + LATER  # from the held record (never committed) to the end
            assert isinstance(seen["stalled"], float) and seen["stalled"] > STUCK_AFTER_S
            ready = await http.get("/readyz")
            assert ready.status_code == 200  # reported, not unready (docs/operations.md)
            [stuck] = ready.json()["checks"]["stuck_partitions"]
            assert (stuck["topic"], stuck["partition"], stuck["lag"]) == (
                names.requests, partition, 1 + LATER)
            print(f"stuck partition reported {took:.1f} s after the records were produced")

            processor.release()  # the held record is answered: the commit moves past all
            await wait_for_answers(settings, {held.request_id}, 30)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                text = (await http.get("/metrics")).text
                if (metric_samples(text, "vf_consumer_lag").get(series) == 0
                        and metric_samples(text, "vf_partitions_stuck").get(()) == 0):
                    break
                await asyncio.sleep(0.5)
            assert metric_samples(text, "vf_consumer_lag").get(series) == 0
            assert metric_samples(text, "vf_partition_commit_stalled_seconds").get(series) == 0
            assert (await http.get("/readyz")).json()["checks"]["stuck_partitions"] == []
    finally:
        processor.release()
        worker.stop()
        await asyncio.wait_for(task, 60)
