"""Dead letters that always fit, on the real broker and S3: a record too big to carry inline
is answered on tts.dlq with a reference to its stored bytes, and its partition moves on."""

from __future__ import annotations

import asyncio
import hashlib
import random
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition

import voicefactory
from consumers.clients.produce import request_and_wait
from consumers.settings import Settings
from consumers.wiring import make_store
from tests.integration.conftest import RunningWorker
from tests.integration.test_contract import _kcat_produce
from tests.integration.test_worker import _read_all
from tests.integration.workers import wait_for_answers
from topics.admin import admin_client
from topics.events import SynthesisRequest, encode
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
        settings: Settings, voice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
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
    # ... and the way back for an operator: `voicefactory dlq get`.
    for name, setting in settings.to_env().items():
        monkeypatch.setenv(name, setting)
    out = tmp_path / "value.bin"
    get = ["dlq", "get", names.requests, str(tp.partition), "0", "--out", str(out)]
    assert await asyncio.to_thread(voicefactory.main, get) == 0
    assert out.read_bytes() == value
    assert dlq["value_sha256"] in capsys.readouterr().out
    get[4] = "1"  # the request after it was answered, not dead-lettered: nothing stored
    assert await asyncio.to_thread(voicefactory.main, get) == 1
    assert "no stored value at" in capsys.readouterr().err


def _kcat(settings: Settings, topic: str, partition: int, key: str, value: bytes,
          header: bytes | None = None) -> None:
    args = [b"kcat", b"-P", b"-b", settings.kafka.bootstrap.encode(), b"-t", topic.encode(),
            b"-p", str(partition).encode(), b"-k", key.encode()]
    if header is not None:  # argv bytes: kcat writes them as the header, unchecked
        args += [b"-H", header]
    subprocess.run(args, input=value + b"\n", check=True, timeout=30)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
async def test_a_header_name_that_is_not_utf8_is_dead_lettered_and_nothing_around_it_lost(
        settings: Settings, voice: str) -> None:
    """aiokafka raises UnicodeDecodeError on every fetch of such a record, and drops what
    it had drained of other partitions in the same call: all of it must be answered."""
    names = topic_names(settings.kafka.topic_prefix)
    tp = TopicPartition(names.requests, partition_for(voice, REQUESTS.partitions))
    other = (tp.partition + 1) % REQUESTS.partitions

    def request(tag: str) -> SynthesisRequest:
        return SynthesisRequest(request_id=f"{tag}-{uuid.uuid4().hex[:8]}", voice_id=voice,
                                text=f"Line {tag}.", language="en")

    before, after, elsewhere = request("before"), request("after"), request("elsewhere")
    _kcat(settings, names.requests, other, voice, encode(elsewhere))
    _kcat(settings, names.requests, tp.partition, voice, encode(before))
    _kcat(settings, names.requests, tp.partition, voice, b"\xff not json",
          header=b"\xff\xfe-name=v")
    _kcat(settings, names.requests, tp.partition, voice, encode(after))
    async with RunningWorker(settings):
        wanted = [before, after, elsewhere]
        # 60 + 30 s below: within pytest's 120-s bound, so a miss fails as what it is.
        answered = await wait_for_answers(settings, {r.request_id for r in wanted}, 60)
        assert {r.request_id: r.status for r in answered} == {
            r.request_id: "succeeded" for r in wanted}
        deadline = time.monotonic() + 30
        while await _committed(settings, tp) < 3 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        assert await _committed(settings, tp) == 3
    [dlq] = [orjson.loads(v) for v in await _read_all(settings, names.dlq)]
    assert (dlq["topic"], dlq["partition"], dlq["offset"]) == (names.requests, tp.partition, 1)
    assert dlq["omitted"] == ["headers", "key", "value"]
    assert "kcat -C" in dlq["reason"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
async def test_a_null_header_value_is_dead_lettered_as_null(settings: Settings,
                                                             voice: str) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    partition = partition_for(voice, REQUESTS.partitions)
    _kcat(settings, names.requests, partition, voice, b"\xff not json", header=b"nothing")
    after = SynthesisRequest(request_id=f"after-{uuid.uuid4().hex[:8]}", voice_id=voice,
                             text="Served after a null header.", language="en")
    async with RunningWorker(settings):
        results = await request_and_wait(settings, [after], timeout_s=90)
    assert results[after.request_id].status == "succeeded"
    [dlq] = [orjson.loads(v) for v in await _read_all(settings, names.dlq)]
    assert dlq["headers"] == [["nothing", None]]
