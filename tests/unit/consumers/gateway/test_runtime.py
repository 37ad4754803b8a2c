"""Gateway.start/stop: a failed start stops what had started, stop() keeps its order, and a
background task that dies is logged. Every Kafka client is a FakePart (no broker)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from consumers import startup
from consumers.fleet.router import FleetRouter
from consumers.gateway import runtime
from consumers.gateway.keys import KeyRing
from consumers.gateway.runtime import Gateway
from consumers.settings import GatewaySettings, Settings
from tests.unit.consumers.parts import FakePart


class Parts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        self.events: list[str] = []
        self.producer = FakePart("producer", self.events)
        self.router = FakePart("router", self.events)
        self.admin = FakePart("admin", self.events)
        self.lag = FakePart("lag", self.events)
        self.fleet = FakePart("fleet", self.events)
        self.fleet_error: Exception | None = None
        monkeypatch.setattr(runtime, "make_producer", lambda *_, **__: self.producer)
        monkeypatch.setattr(runtime, "admin_client", lambda *_, **__: self.admin)
        monkeypatch.setattr(runtime, "fleet_router", self._fleet_router)
        settings = Settings(gateway=GatewaySettings(keys_file=str(tmp_path / "keys")))
        self.gateway = Gateway(settings, keyring=KeyRing(tmp_path / "keys"))
        gw: Any = self.gateway  # the parts Gateway.__init__ made, swapped for fakes
        gw.router = self.router
        gw.router.chunks_of = lambda _request_id: 0
        gw.lag = self.lag
        gw.lag.start = lambda: self.events.append("start lag")

    async def _fleet_router(self, _settings: Settings,
                            _producer: Any) -> tuple[FleetRouter, FakePart]:
        self.events.append("start fleet")
        if self.fleet_error is not None:
            raise self.fleet_error
        return FleetRouter(partitions=12), self.fleet


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Parts:
    return Parts(monkeypatch, tmp_path)


async def test_an_admin_client_that_cannot_start_stops_what_had_started(parts: Parts) -> None:
    parts.admin.fail = KafkaConnectionError("no broker")
    with pytest.raises(KafkaConnectionError):
        await parts.gateway.start()
    assert parts.events == ["start producer", "start router", "start admin",
                            "stop admin", "stop router", "stop producer"]
    assert parts.gateway.producer is None  # readiness says so
    await parts.gateway.stop()  # the lifespan's finally, if it ran: nothing left to stop
    assert parts.events[-1] == "stop producer"


async def test_a_fleet_view_that_cannot_start_stops_the_lag_sampler_and_clients(
        parts: Parts) -> None:
    parts.fleet_error = RuntimeError("tts.fleet unreadable")
    with pytest.raises(RuntimeError, match="unreadable"):
        await parts.gateway.start()
    assert parts.events == ["start producer", "start router", "start admin", "start lag",
                            "start fleet", "stop lag", "stop admin", "stop router",
                            "stop producer"]


async def test_stop_keeps_its_order_and_a_second_stop_does_nothing(parts: Parts) -> None:
    await parts.gateway.start()
    task = parts.gateway._failover_task
    assert task is not None and not task.done()
    del parts.events[:]
    await parts.gateway.stop()
    assert task.cancelled()  # the failover loop first, before anything it sends through
    assert parts.events == ["stop fleet", "stop lag", "stop admin", "stop router",
                            "stop producer"]
    assert (parts.gateway.producer, parts.gateway.fleet) == (None, None)
    await parts.gateway.stop()
    assert len(parts.events) == 5


async def test_a_background_task_that_dies_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def tail() -> None:
        raise KafkaConnectionError("lost the broker")

    log = logging.getLogger("consumers.gateway.runtime")
    task = startup.watch(asyncio.create_task(tail()), logger=log, what="gateway failover loop",
                         context={"topic": "tts.audio"})
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)  # done-callbacks run on the next loop turn
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage().startswith("gateway failover loop failed: KafkaConnectionError")
    assert getattr(record, "topic", None) == "tts.audio"


def test_a_gateway_without_an_instance_id_still_names_its_replica(tmp_path: Path) -> None:
    from consumers.settings import WorkerSettings

    def instance(instance_id: str) -> str:
        settings = Settings(gateway=GatewaySettings(keys_file=str(tmp_path / "keys")),
                            worker=WorkerSettings(instance_id=instance_id))
        return Gateway(settings, keyring=KeyRing(tmp_path / "keys")).instance

    assert instance("gw-0") == "gw-0"
    assert instance("") and instance("") != instance("")  # the console's replica column
