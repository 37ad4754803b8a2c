"""`voicefactory fleet show` / `fleet route` on the real broker: a running worker's own
status, a status produced beside it, a worker gone with a tombstone and one gone silent."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

import voicefactory
from consumers.clients.fleet import FleetRouteAnswer, FleetShow
from consumers.kafka import make_producer
from consumers.settings import Settings
from tests.integration.conftest import RunningWorker
from tests.integration.test_routing import fleet_settings
from topics.fleet import LaneLoad, ProfileCounts, WorkerStatus, encode_status
from topics.partitioning import partition_for
from topics.specs import topic_names

pytestmark = pytest.mark.integration


def flags(settings: Settings) -> list[str]:
    return ["--bootstrap", settings.kafka.bootstrap, "--topic-prefix",
            settings.kafka.topic_prefix]


async def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await asyncio.to_thread(voicefactory.main, argv)
    out, err = capsys.readouterr()
    return code, out, err


async def publish(settings: Settings, records: list[tuple[str, WorkerStatus | None]]) -> None:
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        topic = topic_names(settings.kafka.topic_prefix).fleet
        for worker, status in records:
            await producer.send_and_wait(topic, None if status is None
                                         else encode_status(status), key=worker.encode())
    finally:
        await producer.stop()


def fake(worker: str, at_ms: int, shards: list[int]) -> WorkerStatus:
    lane = LaneLoad(partitions=[], topic_partitions=12, shards=shards, shard_partitions=48,
                    backlog=4, inflight=2, slots=2)
    return WorkerStatus(worker=worker, at_ms=at_ms, interval_ms=60_000,
                        lanes={"batch": lane, "interactive": lane}, hot=["brand"],
                        profiles=ProfileCounts(hit=3, store=1), errors={"engine_error": 1})


async def test_show_and_route_read_the_fleet_topic(
        settings: Settings, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VF_BENCH_BASE_MS", "20")
    now = int(time.time() * 1000)
    prefix = settings.kafka.topic_prefix
    code, out, _ = await cli(["fleet", "show", *flags(settings)], capsys)
    assert code == 1 and "no worker status" in out  # nothing heard yet: a failure for scripts
    async with RunningWorker(fleet_settings(settings, 0)):
        await publish(settings, [
            ("gone", fake("gone", now, [0])), ("gone", None),  # stopped: a tombstone
            ("silent", fake("silent", now - 3_600_000, [1])),  # last heard an hour ago
            ("other", fake("other", now, [47])),
        ])
        me = f"{prefix}w0"

        deadline = time.monotonic() + 60
        while True:  # the worker's first status with its partitions: after the group join
            code, out, _ = await cli(["fleet", "show", "--json", *flags(settings)], capsys)
            ours = [w for w in msgspec.json.decode(out, type=FleetShow).workers if w.id == me]
            if ours and ours[0].lanes["batch"].shards:
                break
            assert time.monotonic() < deadline, f"no status of {me} with partitions: {out}"
            await asyncio.sleep(0.5)
        code, out, _ = await cli(["fleet", "show", "--json", *flags(settings)], capsys)
        assert code == 0
        shown = msgspec.json.decode(out, type=FleetShow)
        assert [w.id for w in shown.workers] == ["other", me]
        other = shown.workers[0]
        assert other.alive and other.lanes["batch"].load == 6 and other.hot_voices == 1
        assert shown.cache.hit == 3 and shown.errors_by_code[0].code == "engine_error"
        assert shown.records >= 5

        code, out, _ = await cli(["fleet", "show", *flags(settings)], capsys)
        assert code == 0 and out.splitlines()[0].startswith(
            f"{prefix}tts.fleet: 2 workers (2 live, 0 draining)")
        assert any(line.split()[:2] == [me, "live"] for line in out.splitlines())

        code, out, _ = await cli(["fleet", "route", "brand", "--json", *flags(settings)],
                                 capsys)
        assert code == 0
        route = msgspec.json.decode(out, type=FleetRouteAnswer)
        # `other` claims shard partition 47, which the worker holds too: the status read
        # later (the worker's, every 200 ms) wins it, so the voice's order is the worker alone.
        assert [(p.worker, p.partition, p.hot) for p in route.order] == [
            (me, partition_for("brand", 48), False)]
        assert route.topic == f"{prefix}tts.requests.shards"
        assert (route.route.worker, route.route.key) == (me, "brand")

    code, out, err = await cli(["fleet", "show", "--topic-prefix", "nosuch.",
                                "--bootstrap", settings.kafka.bootstrap], capsys)
    assert code == 1 and "topic nosuch.tts.fleet does not exist" in err


async def test_show_lists_a_worker_whose_clock_runs_behind(
        settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """A worker host 5 s behind this one: its statuses on the topic's history all look dead
    by this host's clock, and the one written while `fleet show` listens counts."""
    lane = LaneLoad(partitions=[0], topic_partitions=12, slots=2)
    producer = make_producer(settings.kafka)
    await producer.start()
    stop = asyncio.Event()

    async def speak() -> None:  # every 200 ms, as a worker with VF_FLEET_INTERVAL_MS=200
        topic = topic_names(settings.kafka.topic_prefix).fleet
        while not stop.is_set():
            status = WorkerStatus(worker="behind", at_ms=int(time.time() * 1000) - 5_000,
                                  interval_ms=200, lanes={"batch": lane, "interactive": lane})
            await producer.send_and_wait(topic, encode_status(status), key=b"behind")
            await asyncio.sleep(0.2)

    task = asyncio.create_task(speak())
    try:
        await asyncio.sleep(1.0)  # a history of statuses that all look 5 s old here
        code, out, _ = await cli(["fleet", "show", "--json", *flags(settings)], capsys)
        assert code == 0, out
        [worker] = msgspec.json.decode(out, type=FleetShow).workers
        assert worker.id == "behind" and worker.alive and worker.age_s >= 4.5
    finally:
        stop.set()
        await task
        await producer.stop()
