"""The worker under load and faults, on the real stack with the bench engine.

Every test counts answers on `tts.results` by request_id: nothing may be missing; the
duplicates allowed are named per test.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from bench.restart import settled
from consumers.clients.demo import make_reference
from consumers.settings import Settings
from consumers.wiring import make_store
from deploy.local import stack
from pipeline.voices import register_voice
from tests.integration.conftest import RunningWorker
from tests.integration.test_worker import _read_all
from tests.integration.workers import (
    dlq_records,
    duplicates,
    make_requests,
    produce,
    start_worker,
    wait_for_answers,
)
from topics.events import SynthesisRequest
from topics.specs import REQUESTS, REQUESTS_SHARDS, topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def voices(settings: Settings, tmp_path: Path) -> list[str]:
    reference = make_reference(tmp_path / "reference.wav")
    store = make_store(settings.store)
    ids = [f"voice-{i:03d}" for i in range(20)]
    for voice_id in ids:
        register_voice(store, voice_id=voice_id, reference=reference, prompt_text=None,
                       language="en")
    return ids


@pytest.fixture
def bench_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "20")
    monkeypatch.setenv("VF_BENCH_PER_ITEM_MS", "5")


async def test_two_workers_answer_everything_and_keep_voices_apart(
        settings: Settings, voices: list[str], bench_env: None) -> None:
    # Plain keys only: with spill on, a backlog past VF_ROUTE_SPILL_QUEUE would move some
    # of a voice's lines to the other worker (test_routing.py tests that).
    s = settings.with_overrides(engine={"name": "bench"}, routing={"spill_queue": 0})
    requests = make_requests(200, voices=20)
    me = s.worker.instance_id
    async with RunningWorker(s.with_overrides(worker={"instance_id": f"{me}-a"})) as a, \
            RunningWorker(s.with_overrides(worker={"instance_id": f"{me}-b"})) as b:
        await _until_split(a, b)  # both members own partitions: membership stable from here
        await produce(s, requests)
        results = await wait_for_answers(s, {r.request_id for r in requests}, 120)
    assert {r.status for r in results} == {"succeeded"}
    by_id = {r.request_id: r for r in results}
    assert len(by_id) == 200
    workers_per_voice: dict[str, set[str | None]] = defaultdict(set)
    for r in by_id.values():
        workers_per_voice[r.voice_id].add(r.worker)
    assert all(len(w) == 1 for w in workers_per_voice.values()), workers_per_voice
    assert len({w for ws in workers_per_voice.values() for w in ws}) == 2


async def test_poison_request_fails_after_n_attempts_and_its_partition_goes_on(
        settings: Settings, voices: list[str], bench_env: None) -> None:
    s = settings.with_overrides(engine={"name": "bench"}, worker={"max_attempts": 3})
    poison = SynthesisRequest(request_id="poison-1", voice_id="voice-000",
                              text="This always fails [[bench:fail]]")
    after = make_requests(5, voices=1, prefix="after")  # all voice-000: the same partition
    async with RunningWorker(s) as running:
        await produce(s, [poison, *after])
        results = await wait_for_answers(s, {"poison-1", *(r.request_id for r in after)}, 60)
        retries = running.runtime.metrics.render()[0].decode()
    by_id = {r.request_id: r for r in results}
    failed = by_id["poison-1"]
    assert failed.status == "failed" and failed.attempt == 3
    assert failed.error is not None and failed.error.code == "engine_error"
    assert all(by_id[r.request_id].status == "succeeded" for r in after)
    dlq = dlq_records(await _read_all(s, topic_names(s.kafka.topic_prefix).dlq))
    assert [d["offset"] for d in dlq] == [0]
    assert 'vf_retries_total{code="engine_error"} 2.0' in retries


async def test_max_inflight_holds_and_a_full_queue_pauses_partitions(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "30")
    s = settings.with_overrides(engine={"name": "bench"}, worker={
        "max_inflight": 2, "max_batch": 4, "queue_capacity": 16})
    requests = make_requests(400, voices=20)
    await produce(s, requests)
    async with RunningWorker(s) as running:
        deepest, paused_seen = 0, False
        answered: set[str] = set()
        deadline = time.monotonic() + 120
        while len(answered) < len(requests) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            deepest = max(deepest, running.worker.batcher.qsize())
            paused_seen |= bool(running.worker._consumer and running.worker._consumer.paused())
            if running.worker.processed >= len(requests):
                break
        engine = running.runtime.engine
    assert getattr(engine, "max_concurrent_seen", 0) <= 2
    assert getattr(engine, "max_concurrent_seen", 0) == 2
    assert deepest <= 16 + 4 * 20  # capacity plus at most one fetch's overshoot
    assert paused_seen
    results = await wait_for_answers(s, {r.request_id for r in requests}, 60)
    assert duplicates(results) == 0


async def test_sigterm_mid_batch_finishes_commits_and_exits_zero(
        settings: Settings, voices: list[str], tmp_path: Path) -> None:
    requests = make_requests(6, voices=1)
    await produce(settings, requests)
    proc = start_worker(settings, "sigterm-1", tmp_path / "worker.log", VF_ENGINE="bench",
                        VF_BENCH_BASE_MS="1500", VF_MAX_BATCH="8", VF_MAX_INFLIGHT="1")
    try:
        await _wait_log(tmp_path / "worker.log", "assigned partitions", 60)
        await asyncio.sleep(1.0)  # the batch of six is in the engine now
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log
    assert "SIGTERM received" in log
    results = await wait_for_answers(settings, {r.request_id for r in requests}, 30)
    assert duplicates(results) == 0
    committed = await _committed(settings)
    assert sum(committed.values()) == 6, committed


async def test_kill_9_loses_nothing_and_duplicates_only_in_flight_work(
        settings: Settings, voices: list[str], tmp_path: Path) -> None:
    requests = make_requests(120, voices=20)
    env = {"VF_ENGINE": "bench", "VF_BENCH_BASE_MS": "40", "VF_MAX_BATCH": "4"}
    first = start_worker(settings, "kill-a", tmp_path / "a.log", **env)
    try:
        await _wait_log(tmp_path / "a.log", "assigned partitions", 60)
        await produce(settings, requests)
        await _wait_log(tmp_path / "a.log", "succeeded", 60)
        await asyncio.sleep(1.0)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        second = start_worker(settings, "kill-b", tmp_path / "b.log", **env)
        try:
            results = await wait_for_answers(settings, {r.request_id for r in requests}, 120)
        finally:
            second.terminate()
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    # Duplicates come only from answers produced but not yet committed when -9 hit.
    assert duplicates(results) <= 4 * 2 + 64
    store = make_store(settings.store)
    wanted = {r.request_id for r in requests}
    keys = [k for k in store.list_prefix("audio/") if k.rsplit("/", 1)[-1][:-4] in wanted]
    assert len(keys) == len(requests)  # one object per request, never a second one


async def test_s3_outage_of_20_s_loses_nothing(
        settings: Settings, voices: list[str], bench_env: None) -> None:
    if stack.S3.pid() is None:
        pytest.skip("the S3 server was not started by this checkout")
    s = settings.with_overrides(engine={"name": "bench"},
                                worker={"retry_max_delay_s": 2})  # default max_attempts
    requests = make_requests(60, voices=20)
    async with RunningWorker(
            s.with_overrides(worker={"instance_id": f"{s.worker.instance_id}-s3"})) as running:
        await asyncio.sleep(2)
        os.kill(stack.S3.pid() or 0, signal.SIGKILL)
        try:
            await produce(s, requests)
            await asyncio.sleep(20)
        finally:
            await asyncio.to_thread(stack.up, out=io.StringIO())
        results = await wait_for_answers(s, {r.request_id for r in requests}, 180)
        metrics = running.runtime.metrics.render()[0].decode()
    assert {r.request_id for r in results if r.status == "succeeded"} == {
        r.request_id for r in requests}
    assert 'vf_retries_total{code="storage_error"}' in metrics


async def test_broker_restart_loses_nothing(
        settings: Settings, voices: list[str], bench_env: None) -> None:
    if stack.KAFKA.pid() is None:
        pytest.skip("the broker was not started by this checkout")
    s = settings.with_overrides(engine={"name": "bench"})
    first, second = make_requests(40, voices=20, prefix="pre"), make_requests(40, voices=20,
                                                                             prefix="post")
    async with RunningWorker(
            s.with_overrides(worker={"instance_id": f"{s.worker.instance_id}-br"})) as running:
        # A restart during start-up is another case: the worker stops and says why (CI once
        # restarted the broker before a loaded machine had started the worker).
        await _until_split(running)
        await produce(s, first)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(stack.restart_broker)
        await produce(s, second)
        results = await wait_for_answers(s, {r.request_id for r in first + second}, 180)
    assert {r.request_id for r in results} >= {r.request_id for r in first + second}


async def test_a_stop_while_the_broker_is_down_ends_within_the_pod_s_grace(
        settings: Settings, voices: list[str], bench_env: None,
        caplog: pytest.LogCaptureFixture) -> None:
    # aiokafka's producer flushes to a gone broker without end, and its consumers' stops
    # raise a stray CancelledError: before consumers/startup.py bounded the stops, SIGTERM
    # during an outage never ended the worker.
    if stack.KAFKA.pid() is None:
        pytest.skip("the broker was not started by this checkout")
    s = settings.with_overrides(engine={"name": "bench"})
    running = RunningWorker(
        s.with_overrides(worker={"instance_id": f"{s.worker.instance_id}-down"}))
    async with running:
        await _until_split(running)
        requests = make_requests(20, voices=10, prefix="down")
        await produce(s, requests)
        await wait_for_answers(s, {r.request_id for r in requests}, 60)
        try:
            await asyncio.to_thread(stack.stop_broker)
            await asyncio.sleep(2)  # the clients notice; the fleet status goes unsent
            started = time.monotonic()
            running.worker.stop()
            assert running.task is not None
            await asyncio.wait({running.task}, timeout=50)
            took = time.monotonic() - started
        finally:
            await asyncio.to_thread(stack.ensure_up)
        assert running.task.done() and not running.task.cancelled(), took
        assert running.task.exception() is None
    assert took < 45, took  # the worker's grace is 60 s (deploy/k8s)
    assert any(r.getMessage().startswith("stopping producer took over")
               for r in caplog.records), "the producer's flush was not what held the stop"


async def _wait_log(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout_s} s:\n"
                         f"{path.read_text() if path.exists() else ''}")


async def _committed(settings: Settings) -> dict[int, int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(settings.worker.group_id)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


async def test_static_member_restart_keeps_everyone_s_partitions(
        settings: Settings, voices: list[str], bench_env: None) -> None:
    s = settings.with_overrides(engine={"name": "bench"})
    a = s.with_overrides(worker={"instance_id": f"{s.worker.instance_id}-a"})
    b = s.with_overrides(worker={"instance_id": f"{s.worker.instance_id}-b"})
    async with RunningWorker(b) as steady:
        async with RunningWorker(a) as first_a:
            await _until_split(steady, first_a)
            before_a = set(first_a.worker._consumer.assignment())
        before_b = set(steady.worker._consumer.assignment())
        revoked_before = steady.worker.metrics.render()[0]
        async with RunningWorker(a) as second_a:  # back well within the session timeout
            await asyncio.sleep(3)
            after_a = set(second_a.worker._consumer.assignment())
        after_b = set(steady.worker._consumer.assignment())
        revoked_after = steady.worker.metrics.render()[0]
    assert before_a and before_b
    assert after_a == before_a
    assert after_b == before_b
    assert _revocations(revoked_after) == _revocations(revoked_before)


async def test_the_restart_bench_sees_a_group_that_reads_four_lanes_settle(
        settings: Settings) -> None:
    # bench/restart.py watches the owners of tts.requests' partitions; when it counted the
    # four lanes' overlapping partition numbers as one topic's, it never saw the group
    # settle and the section failed every run for two days without a test noticing.
    from bench.processes import InProcessWorker
    from bench.restart import ENGINE, _settled

    s = settings.with_overrides(engine={"name": "bench"})
    names = [f"{s.worker.instance_id}-{i}" for i in range(2)]
    workers = [InProcessWorker(s.with_overrides(worker={"instance_id": name}), ENGINE)
               for name in names]
    for w in workers:
        w.start()
    try:
        topic = topic_names(s.kafka.topic_prefix).requests
        owners = await _settled(workers, topic, timeout_s=60)
    finally:
        await asyncio.gather(*(w.stop() for w in workers))
    assert sorted(owners) == list(range(REQUESTS.partitions))
    assert set(owners.values()) == {0, 1}


LANE_PARTITIONS = 2 * REQUESTS.partitions + 2 * REQUESTS_SHARDS.partitions


async def _until_split(*workers: RunningWorker, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owned = [set(w.worker._consumer.assignment()) if w.worker._consumer else set()
                 for w in workers]
        # every partition of the four request lanes (plain and shard topics), each once
        if settled(owned, LANE_PARTITIONS):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the group never settled with every worker owning partitions")


def _revocations(text: bytes) -> float:
    for line in text.decode().splitlines():
        if line.startswith('vf_rebalances_total{kind="revoked"}'):
            return float(line.split()[-1])
    return 0.0


async def test_synthesis_longer_than_the_session_timeout_keeps_membership(
        settings: Settings, voices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 s of engine time against a 10 s session timeout: heartbeats must go on meanwhile.
    monkeypatch.setenv("VF_BENCH_BASE_MS", "12000")
    s = settings.with_overrides(engine={"name": "bench"},
                                worker={"session_timeout_ms": 10_000})
    [request] = make_requests(1, voices=1, prefix="slow")
    async with RunningWorker(s) as running:
        await produce(s, [request])
        results = await wait_for_answers(s, {request.request_id}, 60)
        metrics = running.runtime.metrics.render()[0]
    assert results[0].status == "succeeded"
    assert (results[0].timings_ms.get("synthesis") or 0) >= 12000
    assert _revocations(metrics) == 0
