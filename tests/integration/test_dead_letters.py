"""Dead letters that always fit, on the real broker and S3: a record too big to carry inline
is answered on tts.dlq with a reference to its stored bytes, and its partition moves on."""

from __future__ import annotations

import asyncio
import hashlib
import random
import shutil
import time
import uuid

import orjson
import pytest
from aiokafka import TopicPartition

from consumers.clients.produce import request_and_wait
from consumers.settings import Settings
from consumers.wiring import make_store
from tests.integration.conftest import RunningWorker
from tests.integration.test_contract import _kcat_produce
from tests.integration.test_worker import _read_all
from topics.admin import admin_client
from topics.events import SynthesisRequest
from topics.partitioning import partition_for
from topics.specs import REQUESTS, topic_names

pytestmark = pytest.mark.integration


async def _committed(settings: Settings, tp: TopicPartition) -> int:
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(settings.worker.group_id)
    finally:
        await admin.close()
    meta = offsets.get(tp)
    return -1 if meta is None else int(meta.offset)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
async def test_a_900_kb_non_json_record_is_dead_lettered_by_reference_and_passed(
        settings: Settings, voice: str) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    tp = TopicPartition(names.requests, partition_for(voice, REQUESTS.partitions))
    # 900 KB of bytes that are not UTF-8, without kcat's line and key delimiters.
    rng = random.Random(24)
    value = bytes(rng.randrange(0x80, 0x100) for _ in range(900_006))
    _kcat_produce(settings, names.requests, [(voice, value)])
    after = SynthesisRequest(request_id=f"after-{uuid.uuid4().hex[:8]}", voice_id=voice,
                             text="Served after the big poison.", language="en")
    async with RunningWorker(settings):
        results = await request_and_wait(settings, [after], timeout_s=90)
        assert results[after.request_id].status == "succeeded"
        deadline = time.monotonic() + 30
        # The group's committed offset lives on the broker: polled, no event to wait on.
        while await _committed(settings, tp) < 2 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        assert await _committed(settings, tp) == 2  # past the poison and the request after it
    [dlq] = [orjson.loads(v) for v in await _read_all(settings, names.dlq)]
    key = f"dlq/{names.requests}/{tp.partition}/0.bin"
    assert dlq["value_ref"] == f"s3://{settings.store.bucket}/{key}"
    assert dlq["value_bytes"] == len(value)
    assert dlq["value_sha256"] == hashlib.sha256(value).hexdigest()
    assert dlq["reason"].startswith("invalid_json")
    assert (dlq["partition"], dlq["offset"]) == (tp.partition, 0)
    stored = make_store(settings.store).get(key)
    assert stored is not None and hashlib.sha256(stored).hexdigest() == dlq["value_sha256"]
    assert stored == value
