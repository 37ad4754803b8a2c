"""Fleet routing on the real broker: workers' statuses, one voice over every worker, more
worker processes than tts.requests has partitions (the shard lanes), and a fleet that grows
past its shard lanes' partitions (`topics grow --lanes shards`) without a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.peerload import spilled_count
from bench.restart import settled
from consumers.fleet.router import FleetRouter
from consumers.fleet.sending import RoutedSender, fleet_router, lane_sender
from consumers.fleet.view import FleetView
from consumers.kafka import make_producer
from consumers.settings import Settings
from tests.integration.conftest import RunningWorker
from tests.integration.workers import produce, start_worker, wait_for_answers
from topics.admin import admin_client, create_topics, grow_request_lanes
from topics.events import SynthesisRequest
from topics.fleet import STALE_INTERVALS
from topics.specs import (
    ALL_TOPICS,
    REQUESTS,
    REQUESTS_INTERACTIVE,
    REQUESTS_INTERACTIVE_SHARDS,
    REQUESTS_SHARDS,
    TopicSpec,
    topic_names,
)

pytestmark = pytest.mark.integration

FAST_ENGINE = {"VF_BENCH_BASE_MS": "60", "VF_BENCH_PER_ITEM_MS": "20"}


def lines(voice: str, n: int) -> list[SynthesisRequest]:
    tag = uuid.uuid4().hex[:6]
    return [SynthesisRequest(request_id=f"route-{tag}-{i:04d}", voice_id=voice,
                             text=f"Line {i} of one narrator.", language="en")
            for i in range(n)]


def fleet_settings(settings: Settings, i: int) -> Settings:
    return settings.with_overrides(engine={"name": "bench"},
                                   worker={"instance_id": f"{settings.kafka.topic_prefix}w{i}"},
                                   routing={"fleet_interval_ms": 200})


async def until(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


class Workers:
    def __init__(self, settings: Settings, n: int) -> None:
        self.running = [RunningWorker(fleet_settings(settings, i)) for i in range(n)]

    async def __aenter__(self) -> Workers:
        for w in self.running:
            await w.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(w.__aexit__() for w in self.running), return_exceptions=True)


@pytest.fixture
async def view(settings: Settings) -> AsyncIterator[FleetRouter]:
    router = FleetRouter(partitions=REQUESTS.partitions)
    async with FleetView(settings.kafka, topic_names(settings.kafka.topic_prefix).fleet,
                         router):
        yield router


def shards_claimed_once(router: FleetRouter, partitions: int) -> bool:
    """Every batch shard partition claimed by exactly one status. Mid-rebalance the view
    can hold a worker's new claims beside the others' old ones (seen: w2 with the grown
    [4, 5], w0 and w1 still with [0] and [1]); a route then goes by the old owner and the
    record is answered by the new one."""
    return settled([status.lane("batch").shards for status in router._status.values()],
                   partitions)


async def send_all(settings: Settings, requests: list[SynthesisRequest],
                   balance: float, workers: int = 1, shards: int = 0) -> RoutedSender:
    """Route `requests` once the view shows `workers` workers owning batch partitions (and,
    with `shards`, that many shard partitions each claimed once): the group's joins settle
    in seconds on an idle machine and in tens on a loaded one."""
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        router, view = await fleet_router(settings, producer)
        assert router is not None and view is not None
        try:
            await until(lambda: len(router.workers("batch")) >= workers and
                        (not shards or shards_claimed_once(router, shards)), 60,
                        f"{workers} workers owning partitions in the view")
            sender = lane_sender(producer, topic_names(settings.kafka.topic_prefix), "batch",
                                 router, balance=balance)
            acks = [(await sender.send(r))[1] for r in requests]
            await asyncio.gather(*acks)
            return sender
        finally:
            await view.stop()
    finally:
        await producer.stop()


async def test_each_worker_states_its_partitions_and_leaves_with_a_tombstone(
        settings: Settings, view: FleetRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    async with Workers(settings, 2):
        await until(lambda: len(view.workers("batch")) == 2, 60, "both workers in the view")
        await until(lambda: sum(len(view._status[w].lane("batch").partitions)
                                for w in view.workers("batch")) == REQUESTS.partitions, 30,
                    "every batch partition owned")
        status = view._status[view.workers("interactive")[0]]
        assert status.lane("batch").slots == 2 and status.lane("interactive").slots == 3
        assert status.lane("interactive").partitions == status.lane("batch").partitions
    await until(lambda: view.workers("batch") == [], 10, "tombstones read")


async def test_a_dynamic_member_is_in_the_view_under_a_name_of_its_own(
        settings: Settings, view: FleetRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty VF_INSTANCE_ID: no group.instance.id. Its status once had an empty worker
    # name, which every view skips, so routers never sent it anything.
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    dynamic = fleet_settings(settings, 1).with_overrides(worker={"instance_id": ""})
    async with RunningWorker(fleet_settings(settings, 0)), RunningWorker(dynamic) as member:
        await until(lambda: len(view.workers("batch")) == 2, 60, "both workers in the view")
        assert member.worker.name in view.workers("batch")
        assert member.worker.name.startswith(f"{socket.gethostname()}-{os.getpid()}-")


async def test_a_stalled_loop_does_not_empty_the_view(
        settings: Settings, view: FleetRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop blocked for twice the staleness bound (as a CPU-starved process's is): the
    view has heard nothing since, and still holds the worker; CI once saw 6 of 20
    gateway routes go out unrouted when it did not."""
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    async with RunningWorker(fleet_settings(settings, 0)) as member:
        await until(lambda: view.workers("batch") == [member.worker.name], 60,
                    "the worker in the view")
        status = view._status[member.worker.name]
        # On purpose: blocks the whole loop, the view and the worker with it.
        time.sleep(2 * STALE_INTERVALS * status.interval_ms / 1000)  # noqa: ASYNC251
        assert view.alive(member.worker.name) and view.route("v").worker == member.worker.name
        await until(lambda: view._status[member.worker.name].at_ms > status.at_ms, 30,
                    "a status written after the stall")
        assert view.alive(member.worker.name)


async def test_a_router_whose_clock_runs_ahead_still_sees_the_workers(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's clock 5 s ahead of the worker's (NTP off, a VM resumed): every status
    looks older than the staleness bound, and the worker was never routed to."""
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    router = FleetRouter(partitions=REQUESTS.partitions,
                         wall_ms=lambda: int(time.time() * 1000) + 5_000)
    async with RunningWorker(fleet_settings(settings, 0)) as member, \
            FleetView(settings.kafka, topic_names(settings.kafka.topic_prefix).fleet, router):
        await until(lambda: router.workers("batch") == [member.worker.name], 60,
                    "the worker in the view")
        assert router.route("v").worker == member.worker.name


async def test_one_voice_is_answered_by_every_worker(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    job = lines(voice, 60)
    async with Workers(settings, 3):
        sender = await send_all(settings, job, balance=1.05, workers=3,
                                shards=REQUESTS_SHARDS.partitions)
        assert sender.router is not None
        assert len(sender.router.workers("batch")) == 3
        results = await wait_for_answers(settings, {r.request_id for r in job}, 90)
    per_worker = Counter(r.worker for r in results if r.request_id.startswith("route-"))
    assert len(per_worker) == 3, per_worker  # one voice, every worker
    assert max(per_worker.values()) <= 1.05 * 60 / 3 + 1
    assert {r.status for r in results} == {"succeeded"}


async def test_more_worker_processes_than_the_request_topic_has_partitions_all_answer(
        settings: Settings, voice: str, tmp_path: Path) -> None:
    """4 worker processes on tts.requests of 2 partitions (shard lanes of 8): two own no
    partition of tts.requests, and every one answers routed work."""
    prefix = f"m{uuid.uuid4().hex[:8]}."
    specs = lane_specs(plain=2, shards=8)
    narrow = settings.with_overrides(kafka={"topic_prefix": prefix},
                                     worker={"group_id": f"vf-synth-{prefix}"},
                                     engine={"name": "bench"}, routing={"fleet_interval_ms": 200})
    admin = admin_client(narrow.kafka.bootstrap)
    await admin.start()
    procs = []
    try:
        await create_topics(admin, prefix=prefix, specs=specs)
        router = FleetRouter(partitions=2)
        async with FleetView(narrow.kafka, topic_names(prefix).fleet, router):
            procs = [start_worker(narrow, f"{prefix}p{i}", tmp_path / f"worker-{i}.log",
                                  **FAST_ENGINE) for i in range(4)]
            await until(lambda: len(router.workers("batch")) == 4
                        and shards_claimed_once(router, 8),
                        120, "4 workers holding every shard partition")
            holding_plain = [s.worker for s in router.statuses() if s.lane("batch").partitions]
            assert len(holding_plain) == 2  # the group's other two own none of tts.requests
            job = lines(voice, 80)
            sender = await send_all(narrow, job, balance=1.05, workers=4, shards=8)
            answered = await wait_for_answers(narrow, {r.request_id for r in job}, 120)
        ours = [r for r in answered if r.request_id in {q.request_id for q in job}]
        per_worker = Counter(r.worker for r in ours)
        assert set(per_worker) == {f"{prefix}p{i}" for i in range(4)}, per_worker
        assert {r.status for r in ours} == {"succeeded"}
        assert sender.router is not None and sender.router.statuses()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        ours_topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if ours_topics:
            await admin.delete_topics(ours_topics)
        await admin.close()


def lane_specs(*, plain: int, shards: int) -> tuple[TopicSpec, ...]:
    """The contract's topics with request lanes of `plain` and shard lanes of `shards`."""
    sizes = {REQUESTS.name: plain, REQUESTS_INTERACTIVE.name: plain,
             REQUESTS_SHARDS.name: shards, REQUESTS_INTERACTIVE_SHARDS.name: shards}
    return tuple(dataclasses.replace(s, partitions=sizes[s.name]) if s.name in sizes else s
                 for s in ALL_TOPICS)


async def test_more_workers_than_partitions_then_the_lanes_grow(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 workers on shard lanes of 2 partitions: one holds nothing and says so; `topics grow
    --lanes shards` to 6 gives every worker partitions at the next metadata refresh, and
    routed work reaches all three."""
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    prefix = f"g{uuid.uuid4().hex[:8]}."
    small = lane_specs(plain=2, shards=2)
    narrow = settings.with_overrides(kafka={"topic_prefix": prefix},
                                     worker={"group_id": f"vf-synth-{prefix}"})
    admin = admin_client(narrow.kafka.bootstrap)
    await admin.start()
    try:
        await create_topics(admin, prefix=prefix, specs=small)
        router = FleetRouter(partitions=2)
        async with FleetView(narrow.kafka, topic_names(prefix).fleet, router), \
                Workers(narrow, 3):
            await until(lambda: len(router._status) == 3 and len(router.workers("batch")) == 2,
                        60, "3 statuses, 2 owners")
            first = lines(voice, 20)
            await send_all(narrow, first, balance=1.05, workers=2)
            answered = await wait_for_answers(narrow, {r.request_id for r in first}, 60)
            assert len({r.worker for r in answered}) == 2  # the third has no partition
            assert await grow_request_lanes(admin, prefix=prefix, partitions=6,
                                            lanes="shards") == [
                prefix + REQUESTS_SHARDS.name, prefix + REQUESTS_INTERACTIVE_SHARDS.name]
            await until(lambda: len(router.workers("batch")) == 3 and
                        shards_claimed_once(router, 6), 60,
                        "the third worker owns a partition after the growth")
            second = lines(voice, 45)
            await send_all(narrow, second, balance=1.05, workers=3, shards=6)
            answered = await wait_for_answers(narrow, {r.request_id for r in second}, 90)
            assert len({r.worker for r in answered
                        if r.request_id in {q.request_id for q in second}}) == 3
        with pytest.raises(ValueError, match="cannot take partitions away"):
            await grow_request_lanes(admin, prefix=prefix, partitions=4, lanes="shards")
    finally:
        ours = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if ours:
            await admin.delete_topics(ours)
        await admin.close()


async def test_a_plain_keyed_backlog_spills_to_the_other_workers_and_nothing_is_lost(
        settings: Settings, voice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An external producer's 120 lines of one voice, keyed by voice_id, on a tts.requests of
    one partition: its owner forwards the backlog past VF_ROUTE_SPILL_QUEUE to the other two
    workers' shard partitions; every line is answered once, by all three."""
    for k, v in FAST_ENGINE.items():
        monkeypatch.setenv(k, v)
    prefix = f"s{uuid.uuid4().hex[:8]}."
    narrow = settings.with_overrides(kafka={"topic_prefix": prefix},
                                     worker={"group_id": f"vf-synth-{prefix}"})
    admin = admin_client(narrow.kafka.bootstrap)
    await admin.start()
    try:
        await create_topics(admin, prefix=prefix, specs=lane_specs(plain=1, shards=6))
        router = FleetRouter(partitions=1)
        async with FleetView(narrow.kafka, topic_names(prefix).fleet, router), \
                Workers(narrow, 3) as workers:
            await until(lambda: len(router.workers("batch")) == 3, 60,
                        "3 workers holding shard partitions")
            await until(lambda: all(spill_view(w) == 3 for w in workers.running), 60,
                        "each worker's own view holding all three")
            job = lines(voice, 120)
            await produce(narrow, job)  # keyed by voice_id, to tts.requests
            answered = await wait_for_answers(narrow, {r.request_id for r in job}, 120)
            spilled = {w.runtime.worker._settings.worker.instance_id: spilled_count(
                w.runtime.worker.metrics.render()[0].decode()) for w in workers.running}
        ours = [r for r in answered if r.request_id in {q.request_id for q in job}]
        per_worker = Counter(r.worker for r in ours)
        assert len(per_worker) == 3 and min(per_worker.values()) >= 20, per_worker  # spread
        assert {r.status for r in ours} == {"succeeded"}
        assert len({r.request_id for r in ours}) == 120 and len(ours) == 120  # none twice
        [owner] = [w for w, n in spilled.items() if n > 0]  # shard records never move again
        assert sum(n for w, n in per_worker.items() if w != owner) == spilled[owner]
    finally:
        ours_topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if ours_topics:
            await admin.delete_topics(ours_topics)
        await admin.close()


def spill_view(worker: RunningWorker) -> int:
    """How many workers the worker's spill router sees owning batch shard partitions."""
    spill = worker.runtime.worker.spill
    return len(spill.router.workers("batch")) if spill is not None else 0

