"""kill -9 of the broker that leads most of tts.requests, under load, then its restart:
every acknowledged request is answered, none is lost, duplicates are absorbed by request_id
(one stored object per request), and the longest stall is measured and reported.

    gateway-role producer (acks=all, idempotent) --~20 requests/s--> tts.requests (rf 3,
        min.insync.replicas 2) --> a worker subprocess (worker role, bench engine)
        --> tts.results, read back with the gateway's credentials
    at 6 s: SIGKILL the busiest leader; at 22 s: start it again; produce until 32 s
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from consumers.clients.demo import make_reference
from consumers.kafka import make_consumer, make_producer, security_kwargs
from consumers.settings import KafkaSettings
from consumers.wiring import make_store
from deploy.local import cluster
from pipeline.voices import register_voice
from tests.integration.cluster.conftest import RoleSettings, assert_no_secret
from tests.integration.workers import start_worker
from topics.admin import admin_client
from topics.events import SynthesisRequest, SynthesisResult, decode_result, encode

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

# Restart well after the controller fences the dead broker (broker.session.timeout.ms, 9 s),
# so the stall measured is the failover alone, not shortened by the node coming back.
RATE_PER_S, PRODUCE_S, KILL_AT_S, RESTART_AT_S = 20, 32.0, 6.0, 22.0


@pytest.mark.timeout(420)
async def test_busiest_leader_killed_under_load_loses_no_acknowledged_request(
        role: RoleSettings, tmp_path: Path) -> None:
    voices = [f"cv-{i:02d}" for i in range(12)]
    store = make_store(role.store)
    reference = make_reference(tmp_path / "reference.wav")
    for voice_id in voices:
        register_voice(store, voice_id=voice_id, reference=reference, prompt_text=None,
                       language="en")
    worker_settings = role("worker", VF_ENGINE="bench")
    log = tmp_path / "worker.log"
    tag = uuid.uuid4().hex[:6]
    worker = start_worker(worker_settings, f"leader-kill-{tag}", log, VF_METRICS_PORT="-1",
                          VF_BENCH_BASE_MS="20", VF_BENCH_PER_ITEM_MS="5")
    victim: cluster.Node | None = None
    try:
        await _wait_log(log, "assigned partitions", 120)
        victim = await _busiest_leader(role("admin").kafka, "tts.requests")
        gateway = role("gateway").kafka
        acked, failed, ack_times, killed_at = await _load_with_a_leader_kill(
            gateway, voices, tag, victim)
        answers = await _wait_answers(gateway, set(acked), 240)
    finally:
        worker.terminate()
        worker.wait(60)
        if victim is not None and victim.pid() is None:
            await asyncio.to_thread(cluster.start_node, victim)
    counts = Counter(r.request_id for r in answers)
    assert set(acked) <= set(counts), f"{len(set(acked) - set(counts))} acknowledged lost"
    assert {r.status for r in answers} == {"succeeded"}
    keys = [k for k in store.list_prefix("audio/") if tag in k]
    assert len(keys) == len(set(counts))  # one object per request: duplicates absorbed
    produce_stall = max(b - a for a, b in itertools.pairwise(sorted(ack_times)))
    done = sorted(_ts(r.completed_at) for r in answers)
    answer_stall = max(b - a for a, b in itertools.pairwise(done))
    report = {"acknowledged": len(acked), "send_failures": failed,
              "duplicates": sum(c - 1 for c in counts.values()),
              "killed": victim.name if victim else None, "killed_at_s": killed_at,
              "longest_produce_ack_gap_s": round(produce_stall, 2),
              "longest_answer_gap_s": round(answer_stall, 2)}
    (cluster.cluster_dir() / "leader-failure.json").write_text(json.dumps(report, indent=1))
    print(f"\nleader failure: {json.dumps(report)}", file=sys.stderr)
    assert_no_secret(log.read_text(), where="the worker's log")


async def _busiest_leader(admin_kafka: KafkaSettings, topic: str) -> cluster.Node:
    admin = admin_client(admin_kafka.bootstrap, **security_kwargs(admin_kafka))
    await admin.start()
    try:
        (meta,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    leaders = Counter(p["leader"] for p in meta["partitions"])
    node_id = leaders.most_common(1)[0][0]
    return next(n for n in cluster.NODES if n.node_id == node_id)


async def _load_with_a_leader_kill(kafka: KafkaSettings, voices: list[str], tag: str,
                                   victim: cluster.Node,
                                   ) -> tuple[list[str], int, list[float], float]:
    producer = make_producer(kafka, linger_ms=5)
    await producer.start()
    acked: list[str] = []
    ack_times: list[float] = []
    failed = 0
    pending: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    killed_at = -1.0

    async def send(request: SynthesisRequest) -> None:
        nonlocal failed
        try:
            await (await producer.send("tts.requests", encode(request),
                                       key=request.voice_id.encode()))
        except Exception:  # not acknowledged: its producer would send it again
            failed += 1
            return
        acked.append(request.request_id)
        ack_times.append(time.monotonic() - started)

    async def fault() -> None:
        nonlocal killed_at
        await asyncio.sleep(KILL_AT_S)
        killed_at = time.monotonic() - started
        await asyncio.to_thread(cluster.stop_node, victim, kill=True)
        await asyncio.sleep(RESTART_AT_S - KILL_AT_S)
        await asyncio.to_thread(cluster.start_node, victim)

    faults = asyncio.create_task(fault())
    try:
        i = 0
        while time.monotonic() - started < PRODUCE_S:
            request = SynthesisRequest(request_id=f"lk-{tag}-{i:05d}",
                                       voice_id=voices[i % len(voices)],
                                       text=f"Line {i} while a broker dies.", language="en")
            task = asyncio.create_task(send(request))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            await asyncio.sleep(1 / RATE_PER_S)
        await asyncio.gather(*pending)
        await faults
    finally:
        await producer.stop()
    return acked, failed, ack_times, killed_at


async def _wait_answers(kafka: KafkaSettings, wanted: set[str], timeout_s: float,
                        ) -> list[SynthesisResult]:
    consumer = make_consumer(kafka, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    answers: list[SynthesisResult] = []
    try:
        tps = [TopicPartition("tts.results", p)
               for p in sorted(consumer.partitions_for_topic("tts.results") or range(12))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    try:
                        result = decode_result(record.value or b"")
                    except ValueError:  # not a result: someone else's test record
                        continue
                    if result.request_id in wanted:
                        answers.append(result)
            if wanted <= {a.request_id for a in answers}:
                break
    finally:
        await consumer.stop()
    return answers


def _ts(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def _wait_log(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout_s} s:\n"
                         f"{path.read_text() if path.exists() else ''}"[-4000:])


