"""The job aggregator (faust) as User:aggregator over SASL_SSL: it joins its group, makes its
changelog topic with three replicas under its prefixed ACL, and turns a job's results
(produced as the worker) into one job event (read as the gateway)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition

from consumers.kafka import make_consumer, make_producer, security_kwargs
from consumers.settings import KafkaSettings
from tests.integration.cluster.conftest import RoleSettings, assert_no_secret
from tests.integration.test_jobs import _fake_result
from tests.integration.workers import worker_env
from topics.admin import admin_client
from topics.events import encode

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
REPO = Path(__file__).resolve().parents[3]


async def test_the_aggregator_runs_as_its_role_and_emits_a_job(
        role: RoleSettings, tmp_path: Path) -> None:
    settings = role("aggregator")
    log = tmp_path / "aggregator.log"
    env = worker_env(settings, VF_INSTANCE_ID=f"agg-{uuid.uuid4().hex[:6]}",
                     VF_AGGREGATOR_DATADIR=str(tmp_path / "faust"), VF_METRICS_PORT="-1")
    proc = _start(env, log)
    job_id = f"cj-{uuid.uuid4().hex[:8]}"
    try:
        deadline = time.monotonic() + 120
        while "aggregating tts.results partitions" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.3)
        producer = make_producer(role("worker").kafka)
        await producer.start()
        try:
            for i in range(2):
                await producer.send_and_wait("tts.results", encode(_fake_result(job_id, i, 2)),
                                             key=job_id.encode())
        finally:
            await producer.stop()
        events = await _read(role("gateway").kafka, "tts.jobs", 90,
                             lambda v: orjson.loads(v).get("job_id") == job_id)
        assert [orjson.loads(e)["status"] for e in events] == ["succeeded"]
    finally:
        proc.terminate()
        proc.wait(60)
    admin_kafka = role("admin").kafka
    admin = admin_client(admin_kafka.bootstrap, **security_kwargs(admin_kafka))
    await admin.start()
    try:
        (changelog,) = await admin.describe_topics(["vf-aggregator-jobs-changelog"])
    finally:
        await admin.close()
    assert {len(p["replicas"]) for p in changelog["partitions"]} == {3}
    text = log.read_text(errors="replace")
    assert "uthoriz" not in text, text[-3000:]
    assert_no_secret(text, where="the aggregator's log")


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "voicefactory", "aggregator",
                                 "--port", "-1"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)


async def _read(kafka: KafkaSettings, topic: str, timeout_s: float,
                wanted: Callable[[bytes], bool]) -> list[bytes]:
    """Values of `topic` (from the start) that `wanted` accepts, once there is one."""
    consumer = make_consumer(kafka, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    found: list[bytes] = []
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                        or range(12))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while not found and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [r.value for r in records if r.value and _safe(wanted, r.value)]
        if found:  # the rest of what is there now: a second event would be a duplicate
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                found += [r.value for r in records if r.value and _safe(wanted, r.value)]
    finally:
        await consumer.stop()
    return found


def _safe(wanted: Callable[[bytes], bool], value: bytes) -> bool:
    try:
        return wanted(value)
    except (ValueError, AttributeError):
        return False
