"""The wire contract against the real broker: kcat producers, partitions, topic drift."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic

import voicefactory
from consumers.clients.produce import request_and_wait
from consumers.settings import Settings
from tests.integration.conftest import RunningWorker
from tests.integration.test_worker import _read_all
from topics.admin import admin_client
from topics.events import SynthesisRequest, decode_result
from topics.partitioning import partition_for
from topics.specs import topic_names

pytestmark = pytest.mark.integration
needs_kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")


def _kcat_produce(settings: Settings, topic: str, lines: list[tuple[str, bytes]]) -> None:
    payload = b"".join(key.encode() + b"\x1f" + value + b"\n" for key, value in lines)
    subprocess.run(["kcat", "-P", "-b", settings.kafka.bootstrap, "-t", topic, "-K", "\x1f",
                    "-X", "partitioner=murmur2_random"], input=payload, check=True, timeout=30)


@needs_kcat
async def test_kcat_messages_land_where_partition_for_predicts(settings: Settings) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    keys = [f"voice-{i}" for i in range(40)] + ["客服-广州", "a", "zz:9"]
    _kcat_produce(settings, names.requests, [(k, orjson.dumps({"k": k})) for k in keys])
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(names.requests, p) for p in range(12)]
        consumer.assign(tps)
        seen: dict[str, int] = {}
        while len(seen) < len(keys):
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                for rec in records:
                    seen[(rec.key or b"").decode()] = tp.partition
    finally:
        await consumer.stop()
    assert seen == {k: partition_for(k, 12) for k in keys}


@needs_kcat
async def test_kcat_requests_are_served_rejected_or_dead_lettered(
        settings: Settings, voice: str) -> None:
    names = topic_names(settings.kafka.topic_prefix)
    good_id = f"kcat-{uuid.uuid4().hex[:8]}"
    _kcat_produce(settings, names.requests, [
        (voice, orjson.dumps({"request_id": good_id, "voice_id": voice, "text": "From kcat."})),
        (voice, orjson.dumps({"request_id": "kcat-bad", "voice_id": voice, "text": "x",
                              "speed": 9})),
        (voice, b"[1, 2, 3]"),
    ])
    async with RunningWorker(settings):
        # A sentinel through the normal client proves the worker got past all three.
        sentinel = SynthesisRequest(request_id=f"s-{uuid.uuid4().hex[:8]}", voice_id=voice,
                                    text="Sentinel.", language="en")
        await request_and_wait(settings, [sentinel], timeout_s=60)
    results = {r.request_id: r for r in map(decode_result, await _read_all(settings,
                                                                           names.results))}
    assert results[good_id].status == "succeeded"
    bad = results["kcat-bad"]
    assert bad.status == "rejected" and bad.error is not None
    assert bad.error.code == "invalid_request" and "speed 9" in bad.error.message
    dlq = [orjson.loads(v) for v in await _read_all(settings, names.dlq)]
    assert [d["reason"] for d in dlq] == ["invalid_json: expected a JSON object, got list"]


async def test_topics_describe_exits_nonzero_on_a_wrong_partition_count(
        settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"drift{uuid.uuid4().hex[:6]}."
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(prefix + "tts.requests", 3, 1)])
    finally:
        await admin.close()
    args = ["topics", "create", "--bootstrap", settings.kafka.bootstrap, "--topic-prefix",
            prefix]
    code = await _in_thread(args)
    assert code == 1
    err = capsys.readouterr().err
    assert f"{prefix}tts.requests: partitions is 3, spec says 12" in err
    assert await _in_thread(["topics", "describe", "--bootstrap", settings.kafka.bootstrap,
                             "--topic-prefix", settings.kafka.topic_prefix]) == 0


async def _in_thread(argv: list[str]) -> int:
    import asyncio

    # The CLI runs its own event loop; give it a thread so it does not nest in the test's.
    return await asyncio.to_thread(voicefactory.main, argv)


async def test_traceparent_is_carried_from_request_to_result(
        settings: Settings, voice: str) -> None:
    from aiokafka import AIOKafkaProducer

    names = topic_names(settings.kafka.topic_prefix)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    await producer.start()
    try:
        sent: list[tuple[str, list[tuple[str, bytes]]]] = [
            ("traced-1", [("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01".encode())]),
            ("untraced-1", [])]
        for rid, request_headers in sent:
            await producer.send_and_wait(names.requests, orjson.dumps(
                {"request_id": rid, "voice_id": voice, "text": "Trace me."}),
                key=voice.encode(), headers=request_headers)
    finally:
        await producer.stop()
    async with RunningWorker(settings):
        sentinel = SynthesisRequest(request_id=f"s-{uuid.uuid4().hex[:8]}", voice_id=voice,
                                    text="Sentinel.", language="en")
        await request_and_wait(settings, [sentinel], timeout_s=60)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    headers: dict[str, str] = {}
    try:
        consumer.assign([TopicPartition(names.results, p) for p in range(12)])
        for _ in range(20):
            for records in (await consumer.getmany(timeout_ms=300)).values():
                for rec in records:
                    rid = decode_result(rec.value or b"{}").request_id
                    headers[rid] = dict(rec.headers)["traceparent"].decode()
            if {"traced-1", "untraced-1"} <= headers.keys():
                break
    finally:
        await consumer.stop()
    assert headers["traced-1"].split("-")[1] == trace_id
    assert headers["traced-1"].split("-")[2] != "00f067aa0ba902b7"  # a new span of that trace
    assert headers["untraced-1"].split("-")[1] != trace_id  # a fresh trace was started
