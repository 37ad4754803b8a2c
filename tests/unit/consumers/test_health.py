from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import cast

import pytest
from aiokafka import TopicPartition

from consumers.health import HealthServer, Heartbeat
from consumers.metrics import WorkerMetrics
from consumers.settings import Settings
from consumers.worker.lag import LagMonitor
from consumers.worker.loop import SynthesisWorker
from pipeline.synthesis import RequestProcessor
from tests.unit.consumers.worker.fakes import FakeConsumer, FakeProducer, make_checkpoint


@dataclass
class Probe:
    """Mutable answers for the server's checks, flipped by the tests."""

    alive: bool = True
    ready: bool = True
    ready_error: Exception | None = None
    ready_hang: bool = False
    checks: dict[str, object] = field(default_factory=lambda: {
        "engine_loaded": True, "broker": True, "store": True, "assignment": True})

    def liveness(self) -> tuple[bool, dict[str, object]]:
        return self.alive, {"event_loop": True, "heartbeat_age_s": 0.1}

    async def readiness(self) -> tuple[bool, dict[str, object]]:
        if self.ready_hang:
            await asyncio.sleep(3600)
        if self.ready_error is not None:
            raise self.ready_error
        return self.ready, dict(self.checks)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        data = json.loads(self.body)
        assert isinstance(data, dict)
        return data


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def metrics() -> WorkerMetrics:
    return WorkerMetrics()


@pytest.fixture
async def server(probe: Probe, metrics: WorkerMetrics) -> AsyncIterator[HealthServer]:
    srv = HealthServer(host="127.0.0.1", port=0, metrics=metrics, liveness=probe.liveness,
                       readiness=probe.readiness, request_timeout_s=0.3, check_timeout_s=0.3)
    await srv.start()
    yield srv
    await srv.stop()


async def send(port: int, raw: bytes, *, eof: bool = False) -> bytes:
    """Write raw bytes (then half-close if `eof`), read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        if eof:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 2.0)
    finally:
        writer.close()
        await writer.wait_closed()


def parse(data: bytes) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, code, _reason = lines[0].split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return Reply(int(code), headers, body)


async def get(port: int, path: str, method: str = "GET") -> Reply:
    return parse(await send(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))


async def test_port_zero_binds_a_free_port_on_loopback(server: HealthServer) -> None:
    assert server.port > 0
    reply = await get(server.port, "/healthz")
    assert reply.status == 200


async def test_healthz_reports_liveness(server: HealthServer, probe: Probe) -> None:
    reply = await get(server.port, "/healthz")
    assert reply.status == 200
    assert reply.json() == {"status": "ok",
                            "checks": {"event_loop": True, "heartbeat_age_s": 0.1}}
    probe.alive = False
    reply = await get(server.port, "/healthz")
    assert reply.status == 503
    assert reply.json()["status"] == "unavailable"


async def test_readyz_toggles_between_200_and_503(server: HealthServer, probe: Probe) -> None:
    ok = await get(server.port, "/readyz")
    assert ok.status == 200
    assert ok.json()["checks"] == probe.checks
    probe.ready = False
    probe.checks["store"] = False
    down = await get(server.port, "/readyz")
    assert down.status == 503
    checks = down.json()["checks"]
    assert isinstance(checks, dict)
    assert checks["store"] is False
    probe.ready = True
    assert (await get(server.port, "/readyz?verbose=1")).status == 200


async def test_readiness_that_raises_or_hangs_is_not_ready(server: HealthServer,
                                                           probe: Probe) -> None:
    probe.ready_error = RuntimeError("store down")
    reply = await get(server.port, "/readyz")
    assert reply.status == 503
    assert "store down" in str(reply.json()["checks"])
    probe.ready_error = None
    probe.ready_hang = True
    reply = await asyncio.wait_for(get(server.port, "/readyz"), 2.0)
    assert reply.status == 503
    assert "timed out" in str(reply.json()["checks"])


async def test_metrics_are_served_as_prometheus_text(server: HealthServer,
                                                     metrics: WorkerMetrics) -> None:
    metrics.on_request_in()
    metrics.set_lag("vf.tts.requests", 3, 42)
    reply = await get(server.port, "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = reply.body.decode()
    assert "vf_requests_in_total 1.0" in text
    assert 'vf_consumer_lag{partition="3",topic="vf.tts.requests"} 42.0' in text


async def test_every_response_has_length_and_closes(server: HealthServer) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/nope"):
        reply = await get(server.port, path)  # read() returning means the server closed
        assert reply.headers["connection"] == "close"
        assert int(reply.headers["content-length"]) == len(reply.body)


async def test_unknown_path_is_404_and_other_methods_405(server: HealthServer) -> None:
    assert (await get(server.port, "/")).status == 404
    assert (await get(server.port, "/metrics/extra")).status == 404
    reply = await get(server.port, "/readyz", method="POST")
    assert reply.status == 405
    assert reply.headers["allow"] == "GET"
    assert (await get(server.port, "/metrics", method="DELETE")).status == 405


@pytest.mark.parametrize("raw", [
    b"garbage\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /healthz\r\n\r\n",
    b"GET healthz HTTP/1.1\r\n\r\n",
    b"\x00\xff\xfe binary \x80\r\n\r\n",
])
async def test_malformed_request_gets_400_and_server_keeps_serving(server: HealthServer,
                                                                   raw: bytes) -> None:
    assert parse(await send(server.port, raw)).status == 400
    assert (await get(server.port, "/healthz")).status == 200


async def test_client_that_hangs_up_or_stalls_does_not_kill_the_server(
        server: HealthServer) -> None:
    # Connect and hang up without a request: nothing to answer, connection closed.
    assert await send(server.port, b"", eof=True) == b""
    # Cut off mid request line: answered as malformed.
    assert parse(await send(server.port, b"GET /heal", eof=True)).status == 400
    # Never finishing the headers: answered 408 after the request timeout.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    stalled = parse(await asyncio.wait_for(reader.read(), 2.0))
    writer.close()
    await writer.wait_closed()
    assert stalled.status == 408
    assert (await get(server.port, "/healthz")).status == 200


async def test_oversized_headers_are_refused(server: HealthServer) -> None:
    raw = b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
    assert parse(await send(server.port, raw)).status == 431
    assert (await get(server.port, "/healthz")).status == 200


class BrokenMetrics(WorkerMetrics):
    def render(self) -> tuple[bytes, str]:
        raise RuntimeError("collector exploded")


async def test_route_that_raises_is_500_and_server_keeps_serving(probe: Probe) -> None:
    srv = HealthServer(host="127.0.0.1", port=0, metrics=BrokenMetrics(),
                       liveness=probe.liveness, readiness=probe.readiness)
    await srv.start()
    try:
        reply = await get(srv.port, "/metrics")
        assert reply.status == 500
        assert int(reply.headers["content-length"]) == len(reply.body)
        assert (await get(srv.port, "/healthz")).status == 200
    finally:
        await srv.stop()


async def test_stop_closes_the_listener(probe: Probe, metrics: WorkerMetrics) -> None:
    srv = HealthServer(host="127.0.0.1", port=0, metrics=metrics, liveness=probe.liveness,
                       readiness=probe.readiness)
    await srv.start()
    port = srv.port
    # A connection left open mid-request must not hold up stop().
    _idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.01)
    await asyncio.wait_for(srv.stop(), 2.0)
    idle_writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


def test_heartbeat_age_and_alive() -> None:
    now = [100.0]
    hb = Heartbeat(clock=lambda: now[0])
    assert hb.age() == 0.0
    assert hb.alive(30.0)
    now[0] = 131.0
    assert hb.age() == pytest.approx(31.0)
    assert not hb.alive(30.0)
    hb.beat()
    assert hb.age() == 0.0
    assert hb.alive(30.0)


def test_heartbeat_uses_monotonic_clock_by_default() -> None:
    hb = Heartbeat()
    hb.beat()
    assert 0.0 <= hb.age() < 1.0
    assert hb.alive(1.0)


class _Processor:
    """The one processor call readiness makes, and what the worker reads of it at start."""

    mixes_voices = False

    def store_reachable(self) -> bool:
        return True


async def test_worker_readyz_reports_the_engine_state_not_a_constant(
        metrics: WorkerMetrics) -> None:
    loaded = False
    worker = SynthesisWorker(settings=Settings(), processor=cast(RequestProcessor, _Processor()),
                             metrics=metrics, engine_ready=lambda: loaded)
    # The consumer side as it is once fetching: partitions assigned, the broker answering.
    worker._consumer = SimpleNamespace(assignment=lambda: {TopicPartition("tts.requests", 0)})
    worker._last_fetch_ok = time.monotonic()
    srv = HealthServer(host="127.0.0.1", port=0, metrics=metrics, liveness=worker.liveness,
                       readiness=worker.readiness)
    await srv.start()  # before the engine is loaded, as the wiring starts it for CosyVoice
    try:
        reply = await get(srv.port, "/readyz")
        assert reply.status == 503
        assert reply.json()["checks"] == {"engine_loaded": False, "broker": True,
                                          "store": True, "assignment": True, "draining": False,
                                          "stuck_partitions": [], "producer_fatal": False}
        loaded = True
        reply = await get(srv.port, "/readyz")
        assert reply.status == 200
        checks = reply.json()["checks"]
        assert isinstance(checks, dict)
        assert checks["engine_loaded"] is True
    finally:
        await srv.stop()


async def test_worker_engine_is_loaded_by_default() -> None:
    worker = SynthesisWorker(settings=Settings(), processor=cast(RequestProcessor, _Processor()))
    ready, checks = await worker.readiness()
    assert checks["engine_loaded"] is True
    assert ready is False  # no broker contact nor assignment yet


async def test_worker_readyz_lists_stuck_partitions_and_stays_ready(
        metrics: WorkerMetrics) -> None:
    """A stuck partition is in /readyz's body; it does not make the worker unready (a 503
    would hold the PodDisruptionBudget and stall a rollout without moving the record)."""
    now = [1000.0]
    stuck_tp, moving_tp = TopicPartition("tts.requests", 3), TopicPartition("tts.requests", 4)
    consumer = FakeConsumer(assigned={stuck_tp, moving_tp}, high={stuck_tp: 9, moving_tp: 9},
                            group={stuck_tp: 4, moving_tp: 4})
    lag = LagMonitor(consumer=consumer, metrics=metrics, stuck_after_s=5.0,
                     clock=lambda: now[0])
    worker = SynthesisWorker(settings=Settings(), processor=cast(RequestProcessor, _Processor()),
                             metrics=metrics)
    worker.checkpoint = make_checkpoint(consumer, FakeProducer(), metrics, lag=lag)
    worker._consumer = consumer
    worker._last_fetch_ok = time.monotonic()
    await worker.checkpoint.update_lag()
    now[0] += 6.0
    lag.committed({moving_tp: 6})
    await worker.checkpoint.update_lag()
    srv = HealthServer(host="127.0.0.1", port=0, metrics=metrics, liveness=worker.liveness,
                       readiness=worker.readiness)
    await srv.start()
    try:
        reply = await get(srv.port, "/readyz")
        scraped = (await get(srv.port, "/metrics")).body.decode()
    finally:
        await srv.stop()
    assert reply.status == 200
    checks = reply.json()["checks"]
    assert isinstance(checks, dict)
    assert checks["stuck_partitions"] == [{"topic": "tts.requests", "partition": 3,
                                           "committed": 4, "lag": 5, "stalled_s": 6.0}]
    assert "vf_partitions_stuck 1.0" in scraped
    assert ('vf_partition_commit_stalled_seconds{partition="3",topic="tts.requests"} 6.0'
            in scraped)
    assert 'vf_consumer_lag{partition="4",topic="tts.requests"} 3.0' in scraped
