"""SynthesisWorker.run(): what a failed start-up stops, the order of a normal shutdown, and
that a task nobody awaits is logged when it dies. Every client is a FakePart (no broker)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import cast

import pytest
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from consumers.settings import RoutingSettings, Settings, WorkerSettings
from consumers.worker import lanes, loop
from consumers.worker.errors import FatalPublishError
from consumers.worker.lanes import MissingTopics
from consumers.worker.loop import SynthesisWorker
from pipeline.synthesis import RequestProcessor
from tests.unit.consumers.parts import FakePart
from topics.specs import topic_names

NAMES = topic_names("")
EVERY_TOPIC = {NAMES.requests, NAMES.requests_interactive, NAMES.requests_shards,
               NAMES.requests_interactive_shards, NAMES.control, NAMES.fleet}


class Clients:
    """The worker's clients and health server as FakeParts, patched into loop.py."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        self.health = FakePart("health", self.events)
        self.producer = FakePart("producer", self.events)
        # The control consumer answers check_topics; without tts.control in its answer the
        # reader skips its replay (a warning), which is all a FakePart can serve.
        self.control = FakePart("control", self.events,
                                topics_found=EVERY_TOPIC - {NAMES.control})
        self.group = FakePart("group", self.events, topics_found=set(EVERY_TOPIC))
        monkeypatch.setattr(loop, "HealthServer", lambda **_: self.health)
        monkeypatch.setattr(loop, "make_producer", lambda *_, **__: self.producer)
        monkeypatch.setattr(loop, "make_consumer", lambda *_, **__: self.control)
        monkeypatch.setattr(lanes, "group_consumer", lambda _settings: self.group)

    def worker(self, monkeypatch: pytest.MonkeyPatch) -> SynthesisWorker:
        # Spill off: its fleet view is one more Kafka client, which these fakes do not stand in for.
        settings = Settings(worker=WorkerSettings(instance_id="w-test"),
                            routing=RoutingSettings(fleet_interval_ms=60_000, spill_queue=0))
        processor = cast(RequestProcessor, SimpleNamespace(answers=None, mixes_voices=False))
        worker = SynthesisWorker(settings=settings, processor=processor)
        monkeypatch.setattr(worker._threads, "shutdown",
                            lambda: self.events.append("stop threads"))
        return worker


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Clients:
    return Clients(monkeypatch)


async def test_missing_topics_stop_every_part_that_started_in_reverse(
        clients: Clients, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    clients.control.topics_found = {NAMES.requests}  # older than the interactive lane
    worker = clients.worker(monkeypatch)
    with pytest.raises(MissingTopics, match=NAMES.requests_interactive):
        await worker.run()
    assert clients.events == [  # checked before joining the group: it never started
        "start health", "start producer", "start control",
        "stop group", "stop control", "stop producer", "stop threads", "stop health"]
    assert "worker start-up failed, stopping what had started" in caplog.text


async def test_a_group_consumer_that_cannot_start_is_stopped_with_the_rest(
        clients: Clients, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stop is registered before its start: a half-started aiokafka client has open
    connections, and stop() is safe on it."""
    clients.group.fail = KafkaConnectionError("broker refused")
    worker = clients.worker(monkeypatch)
    with pytest.raises(KafkaConnectionError):
        await worker.run()
    assert clients.events == [
        "start health", "start producer", "start control", "start group",
        "stop group", "stop control", "stop producer", "stop threads", "stop health"]


async def test_a_producer_that_cannot_start_closes_every_client_made(
        clients: Clients, monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumers were made, not started: they are closed too (aiokafka warns of an
    unclosed client), the health server and threads after them."""
    clients.producer.fail = KafkaConnectionError("no broker")
    worker = clients.worker(monkeypatch)
    with pytest.raises(KafkaConnectionError):
        await worker.run()
    assert clients.events == ["start health", "start producer", "stop group", "stop control",
                              "stop producer", "stop threads", "stop health"]


async def test_an_engine_that_cannot_load_stops_the_health_server(
        clients: Clients, monkeypatch: pytest.MonkeyPatch) -> None:
    def warm_up() -> None:
        raise RuntimeError("CUDA out of memory")

    worker = clients.worker(monkeypatch)
    worker._warm_up = warm_up
    with pytest.raises(RuntimeError, match="out of memory"):
        await worker.run()
    assert clients.events == ["start health", "stop threads", "stop health"]
    assert worker._warming is False


async def test_a_failing_stop_is_logged_and_the_rest_still_stop(
        clients: Clients, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    clients.control.topics_found = set()
    events = clients.events

    async def broken_stop() -> None:
        events.append("stop control")
        raise RuntimeError("control consumer would not close")

    monkeypatch.setattr(clients.control, "stop", broken_stop)
    worker = clients.worker(monkeypatch)
    with pytest.raises(MissingTopics):  # still the error reported, not the stop's
        await worker.run()
    assert events[-4:] == ["stop control", "stop producer", "stop threads", "stop health"]
    assert "stopping control reader failed; stopping the rest" in caplog.text


async def test_a_normal_shutdown_drains_then_stops_in_the_order_it_always_had(
        clients: Clients, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = clients.worker(monkeypatch)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(clients.producer.sent.wait(), 10)  # serving: a fleet status out
    assert clients.events[-1] == f"send {NAMES.fleet}"
    assert not running.done()
    started = len(clients.events)
    worker.stop()
    await asyncio.wait_for(running, 10)
    assert clients.events[started:] == [
        f"send {NAMES.fleet}",  # the draining status, before the drain
        f"tombstone {NAMES.fleet}",  # after it
        "stop group", "stop control", "stop producer", "stop threads", "stop health"]


async def test_a_fatal_producer_error_drops_readiness_then_stops_the_worker_with_an_error(
        clients: Clients, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    worker = clients.worker(monkeypatch)
    worker._processor = cast(RequestProcessor, SimpleNamespace(
        answers=None, store_reachable=lambda: True))
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(clients.producer.sent.wait(), 10)

    async def answer_cut_short() -> None:  # an answer whose publish met the fatal error
        raise FatalPublishError(ProducerFenced())

    worker._on_fatal(ProducerFenced())
    worker._on_fatal(ProducerFenced())  # every other answer in flight reports it too
    worker._spawn(answer_cut_short())
    ready, checks = await worker.readiness()
    assert not ready and checks["producer_fatal"] is True
    # `voicefactory worker` maps a RuntimeError out of run() to exit code 1 (main()).
    with pytest.raises(FatalPublishError, match="ProducerFenced") as raised:
        await asyncio.wait_for(running, 10)
    assert isinstance(raised.value, RuntimeError)
    assert clients.events[-3:] == ["stop producer", "stop threads", "stop health"]
    fatal = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.levelno for r in fatal] == [logging.CRITICAL]  # one clear line
    assert "the producer can publish nothing more (ProducerFenced" in fatal[0].getMessage()


async def test_a_spawned_task_that_dies_is_logged_with_its_context(
        clients: Clients, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    worker = clients.worker(monkeypatch)

    async def publish_answer() -> None:
        raise RuntimeError("producer gone")

    async def wait_forever() -> None:
        await asyncio.Event().wait()

    caplog.set_level(logging.ERROR, logger="consumers.worker.loop")
    worker._spawn(publish_answer(), {"partition": 3, "offset": 41, "request_id": "r-41"})
    worker._spawn(wait_forever())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    [record] = [r for r in caplog.records if r.name == "consumers.worker.loop"]
    assert record.levelno == logging.ERROR
    assert "publish_answer failed: RuntimeError('producer gone')" in record.getMessage()
    assert (getattr(record, "partition", None), getattr(record, "offset", None),
            getattr(record, "request_id", None)) == (3, 41, "r-41")
    assert record.exc_info is not None
    for task in list(worker._tasks):  # a cancelled task is not a failure: nothing logged
        task.cancel()
    await asyncio.gather(*worker._tasks, return_exceptions=True)
    assert len([r for r in caplog.records if r.name == "consumers.worker.loop"]) == 1


def test_a_device_gate_of_another_shape_is_refused() -> None:
    from consumers.worker.gate import LaneGate

    settings = Settings(worker=WorkerSettings(max_inflight=2, interactive_slots=1))
    with pytest.raises(ValueError, match="device gate runs 2 calls at once, the worker's "
                                         "shape 3"):
        SynthesisWorker(settings=settings, processor=cast(RequestProcessor, object()),
                        device_gate=LaneGate(2, batch_share=0.1))


def test_a_dynamic_member_still_has_a_name_routers_accept() -> None:
    # An empty VF_INSTANCE_ID joins the group without group.instance.id; its fleet status
    # must still name it, or every router skips the status and never sends to it.
    from topics.fleet import WorkerStatus, decode_status, encode_status

    settings = Settings(worker=WorkerSettings(instance_id=""))
    processor = cast(RequestProcessor, SimpleNamespace(answers=None, mixes_voices=False))
    first = SynthesisWorker(settings=settings, processor=processor)
    second = SynthesisWorker(settings=settings, processor=processor)
    assert first.name and second.name and first.name != second.name  # one process, two
    status = WorkerStatus(worker=first.name, at_ms=1, interval_ms=500)
    assert decode_status(encode_status(status)).worker == first.name
    static = SynthesisWorker(settings=Settings(worker=WorkerSettings(instance_id="vf-worker-0")),
                             processor=processor)
    assert static.name == "vf-worker-0"
