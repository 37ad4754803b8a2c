"""kill -9 of the broker that leads most of tts.requests, under load, then its restart:
every acknowledged request is answered, none is lost, duplicates are absorbed by request_id
(one stored object per request), and the longest stall is measured and reported.

    gateway-role producer (acks=all, idempotent) --~20 requests/s--> tts.requests (rf 3,
        min.insync.replicas 2) --> a worker subprocess (worker role, bench engine)
        --> tts.results, read back with the gateway's credentials
    and a librdkafka producer, kcat as the gateway (acks=all, idempotent, murmur2_random)
        --~10 requests/s--> tts.requests --> the same worker --> tts.results, read as they
        come by a kcat consumer (gateway role) running through the kill and the restart
    and at the same time, through HTTP:
    3 callers --POST /v1/audio/speech (wav whole, pcm streamed)--> `voicefactory gateway`
        (a subprocess, gateway role) --> tts.requests.interactive --> the same worker
        --> chunks on tts.audio --> the gateway --> the caller
    at 6 s: SIGKILL the busiest leader; at 22 s: start it again; load until 32 s, then a
    few more speech requests that must all be served
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import sys
import time
import uuid
import wave
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition

from consumers.clients.demo import make_reference
from consumers.gateway.keys import add_key
from consumers.kafka import make_consumer, make_producer, security_kwargs
from consumers.settings import KafkaSettings
from consumers.wiring import make_store
from deploy.local import cluster
from pipeline.engines.base import SynthesisItem
from pipeline.engines.bench import SAMPLE_RATE, BenchEngine
from pipeline.voices import register_voice
from tests.integration.cluster.conftest import RoleSettings, assert_no_secret
from tests.integration.cluster.kcat import KcatConsumer, KcatProducer, write_config
from tests.integration.gateway_harness import cli_gateway
from tests.integration.workers import start_worker
from topics.admin import admin_client
from topics.events import (
    SynthesisRequest,
    SynthesisResult,
    decode_json,
    decode_result,
    encode,
)
from topics.tenancy import DEFAULT_TENANT

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

# Restart well after the controller fences the dead broker (broker.session.timeout.ms, 9 s),
# so the stall measured is the failover alone, not shortened by the node coming back.
RATE_PER_S, PRODUCE_S, KILL_AT_S, RESTART_AT_S = 20, 32.0, 6.0, 22.0
KCAT_EVERY = 2  # every second tick also sends one request through kcat: ~10/s
# HTTP callers, each one request at a time with a pause between; the gateway gives up on an
# answer after GATEWAY_TIMEOUT_S (504), its producer on a send after aiokafka's 40 s request
# timeout (503): a caller waiting longer than both together has met a hang.
CALLERS, CALL_PAUSE_S, GATEWAY_TIMEOUT_S, AFTER_CALLS = 3, 0.3, 30.0, 6
HANG_BOUND_S = 40.0 + GATEWAY_TIMEOUT_S + 10.0
DOCUMENTED_FAILURES = {503, 504}


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
    gateway_log = tmp_path / "gateway.log"
    tag = uuid.uuid4().hex[:6]
    # the voices above belong to the default tenant (registered without one), so the key does too
    key = add_key(tmp_path / "keys", DEFAULT_TENANT, rate=1000, streams=CALLERS * 4)
    gateway_settings = role("gateway", VF_GATEWAY_KEYS_FILE=str(tmp_path / "keys"),
                            VF_GATEWAY_TIMEOUT_S=str(GATEWAY_TIMEOUT_S))
    worker = start_worker(worker_settings, f"leader-kill-{tag}", log, VF_METRICS_PORT="-1",
                          VF_BENCH_BASE_MS="20", VF_BENCH_PER_ITEM_MS="5")
    victim: cluster.Node | None = None
    kcat_config = write_config(tmp_path / "kcat.conf", role.env("gateway"))
    producer: KcatProducer | None = None
    reader: KcatConsumer | None = None
    try:
        async with cli_gateway(gateway_settings, log=gateway_log, ready_s=120) as (_, url):
            await _wait_log(log, "assigned partitions", 120)
            victim = await _busiest_leader(role("admin").kafka, "tts.requests")
            gateway = role("gateway").kafka
            started = time.monotonic()
            reader = KcatConsumer(kcat_config, gateway.bootstrap, "tts.results",
                                  int(time.time() * 1000) - 2000, started)
            producer = KcatProducer(kcat_config, gateway.bootstrap, "tts.requests", started)
            (acked, failed, ack_times, killed_at), calls = await asyncio.gather(
                _load_with_a_leader_kill(gateway, voices, tag, victim, started, producer),
                _speak_during(url, key, voices, started))
            calls += await _speak(url, key, voices, "after", AFTER_CALLS, started)
            kcat_code = await asyncio.to_thread(producer.close, 360)
            kcat_delivered = producer.delivered
            kcat_acked = await _records_at(role("admin").kafka, "tts.requests",
                                           [(p, o) for _, p, o in kcat_delivered])
            answers = await _wait_answers(gateway, set(acked) | set(kcat_acked), 240)
            kcat_read = await _kcat_results(reader, set(kcat_acked), 60)
    finally:
        kcat_log = reader.stop() if reader is not None else ""
        if producer is not None and producer.proc.poll() is None:
            producer.proc.kill()
        worker.terminate()
        worker.wait(60)
        if victim is not None and victim.pid() is None:
            await asyncio.to_thread(cluster.start_node, victim)
    counts = Counter(r.request_id for r in answers)
    assert set(acked) <= set(counts), f"{len(set(acked) - set(counts))} acknowledged lost"
    # librdkafka: kcat waited for every delivery report; all were acknowledged, and each
    # acknowledged record is answered, as seen by aiokafka and by kcat's own consumer
    assert producer is not None
    assert kcat_code == 0, producer.log[-4000:]
    assert len(kcat_delivered) == producer.sent, producer.log[-4000:]
    assert len(kcat_acked) == len(kcat_delivered) and all(
        i.startswith(f"kc-{tag}-") for i in kcat_acked)
    assert set(kcat_acked) <= set(counts), \
        f"{len(set(kcat_acked) - set(counts))} acknowledged kcat requests lost"
    assert set(kcat_acked) <= set(kcat_read), \
        f"kcat's consumer missed {len(set(kcat_acked) - set(kcat_read))} answers"
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
              "longest_answer_gap_s": round(answer_stall, 2),
              "kcat": _kcat_report(kcat_delivered, kcat_read, producer.sent),
              "http": _http_report(calls)}
    (cluster.cluster_dir() / "leader-failure.json").write_text(json.dumps(report, indent=1))
    print(f"\nleader failure: {json.dumps(report)}", file=sys.stderr)
    assert_no_secret(log.read_text(), where="the worker's log")
    assert_no_secret(producer.log, kcat_log, where="kcat's output")
    gateway_text = gateway_log.read_text(errors="replace")
    assert_no_secret(gateway_text, where="the gateway's log")
    assert "AuthorizationFailed" not in gateway_text, gateway_text[-4000:]  # ACLs complete
    _check_calls(calls)


# -- speech requests through the gateway -------------------------------------------------------

@dataclass
class Call:
    phase: str  # "during" (the load's 32 s, kill and restart included) or "after"
    sent_s: float  # since the load started
    took_s: float
    status: int | None  # None: no HTTP status came back (the connection failed or hung)
    streamed: bool
    audio_bytes: int
    expected_bytes: int
    error: str = ""

    @property
    def complete(self) -> bool:
        return self.status == 200 and self.audio_bytes == self.expected_bytes and not self.error


def _text(caller: int, i: int) -> str:
    """Letters only: the worker's text front-end leaves it as it is, so the bench engine's
    length for it is known here."""
    words = ["amber", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath"]
    return f"Caller {words[caller % 8]} says {words[i % 8]} and {words[(i // 8) % 8]}."


def _expected_pcm_bytes(text: str) -> int:
    seconds = BenchEngine().seconds_for(SynthesisItem(text=text, language="en", speed=1.0))
    return 2 * max(1, round(seconds * SAMPLE_RATE))


async def _speak_during(url: str, key: str, voices: list[str], started: float) -> list[Call]:
    per_caller = await asyncio.gather(*(
        _speak(url, key, voices, "during", None, started, caller=c) for c in range(CALLERS)))
    return [call for calls in per_caller for call in calls]


async def _speak(url: str, key: str, voices: list[str], phase: str, count: int | None,
                 started: float, *, caller: int = CALLERS) -> list[Call]:
    """One caller's requests, one at a time: `count` of them, or until the load ends.
    Even ones ask for a whole wav file, odd ones for raw PCM streamed as it is made."""
    calls: list[Call] = []
    timeout = httpx.Timeout(HANG_BOUND_S, connect=5.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout,
                                 headers={"Authorization": f"Bearer {key}"}) as http:
        i = 0
        while (count is None and time.monotonic() - started < PRODUCE_S) or \
                (count is not None and i < count):
            text, streamed = _text(caller, i), i % 2 == 1
            body = {"model": "tts-1", "voice": voices[(caller * 5 + i) % len(voices)],
                    "input": text, "response_format": "pcm" if streamed else "wav"}
            if streamed:
                body["stream_format"] = "audio"
            calls.append(await _call(http, body, phase, started, streamed,
                                     _expected_pcm_bytes(text)))
            i += 1
            await asyncio.sleep(CALL_PAUSE_S)
    return calls


async def _call(http: httpx.AsyncClient, body: dict[str, str], phase: str, started: float,
                streamed: bool, expected: int) -> Call:
    sent = time.monotonic()
    status: int | None = None
    data, error = b"", ""
    try:
        async with http.stream("POST", "/v1/audio/speech", json=body) as response:
            status = response.status_code
            data = b"".join([piece async for piece in response.aiter_bytes()])
    except httpx.HTTPError as exc:  # a hang past the bound, or a stream cut after its 200
        error = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - sent
    audio = len(data)
    if status == 200 and not streamed and not error:
        with wave.open(io.BytesIO(data)) as w:  # the header's length matches what came
            audio = w.getnframes() * w.getsampwidth()
            if len(data) - 44 != audio or w.getframerate() != SAMPLE_RATE:
                error = f"wav of {len(data)} bytes declares {audio} bytes of frames"
    elif status is not None and status != 200:
        error = data.decode(errors="replace")[:300]
    return Call(phase, round(sent - started, 2), round(took, 2), status, streamed, audio,
                expected, error)


def _check_calls(calls: list[Call]) -> None:
    during = [c for c in calls if c.phase == "during"]
    after = [c for c in calls if c.phase == "after"]
    assert len(during) >= CALLERS * 10, f"only {len(during)} speech requests during the load"
    for call in calls:
        if call.status == 200:  # every 200 carries the whole clip, never a cut stream
            assert call.complete, call
        else:  # the stall's failures: a documented status within the bound, never a 500
            assert call.status in DOCUMENTED_FAILURES, call
        assert call.took_s < HANG_BOUND_S, call
    assert all(c.complete for c in after), [c for c in after if not c.complete]
    assert any(c.complete for c in during if c.sent_s > RESTART_AT_S), \
        "no speech request served after the broker's restart"


def _http_report(calls: list[Call]) -> dict[str, object]:
    served = sorted((c.sent_s + c.took_s) for c in calls if c.status == 200)
    gaps = [b - a for a, b in itertools.pairwise(served)]
    return {"requests": len(calls),
            "statuses": dict(Counter(str(c.status) for c in calls)),
            "longest_200_s": max((c.took_s for c in calls if c.status == 200), default=None),
            "longest_failed_s": max((c.took_s for c in calls if c.status != 200), default=None),
            "longest_gap_between_200s_s": round(max(gaps), 2) if gaps else None,
            "p50_200_s": _median([c.took_s for c in calls if c.status == 200])}


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


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
                                   victim: cluster.Node, started: float, kcat: KcatProducer,
                                   ) -> tuple[list[str], int, list[float], float]:
    producer = make_producer(kafka, linger_ms=5)
    await producer.start()
    acked: list[str] = []
    ack_times: list[float] = []
    failed = 0
    pending: set[asyncio.Task[None]] = set()
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
            if i % KCAT_EVERY == 0:  # kcat's acknowledgements: its delivery reports
                by_kcat = SynthesisRequest(request_id=f"kc-{tag}-{i:05d}",
                                           voice_id=voices[(i // KCAT_EVERY) % len(voices)],
                                           text=f"Line {i} from kcat.", language="en")
                kcat.send(by_kcat.voice_id, encode(by_kcat).decode())
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


async def _records_at(kafka: KafkaSettings, topic: str, where: list[tuple[int, int]],
                      ) -> list[str]:
    """The request ids of the records at these (partition, offset)s: which ones kcat's
    delivery reports acknowledged."""
    wanted: dict[int, set[int]] = {}
    for partition, offset in where:
        wanted.setdefault(partition, set()).add(offset)
    consumer = make_consumer(kafka, enable_auto_commit=False)
    await consumer.start()
    found: list[str] = []
    try:
        for partition, offsets in sorted(wanted.items()):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, min(offsets))
            left = set(offsets)
            deadline = time.monotonic() + 60
            while left and time.monotonic() < deadline:
                for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    if record.offset in left:
                        left.discard(record.offset)
                        found.append(decode_json(record.value or b"", SynthesisRequest).request_id)
            assert not left, f"{topic}[{partition}] has no records at {sorted(left)[:5]}"
    finally:
        await consumer.stop()
    return found


async def _kcat_results(reader: KcatConsumer, wanted: set[str], timeout_s: float,
                        ) -> dict[str, float]:
    """request_id -> when kcat's consumer printed its result (s since the load started)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for at, line in reader.lines:
            try:
                result = decode_result(line.encode())
            except ValueError:  # another test's record, or not a result
                continue
            seen.setdefault(result.request_id, at)
        if wanted <= set(seen):
            break
        await asyncio.sleep(0.5)
    return {k: v for k, v in seen.items() if k in wanted}


def _kcat_report(delivered: list[tuple[float, int, int]], read: dict[str, float],
                 sent: int) -> dict[str, object]:
    acks = sorted(at for at, _, _ in delivered)
    reads = sorted(read.values())
    return {"sent": sent, "acknowledged": len(delivered), "answers_read_by_kcat": len(read),
            "longest_ack_gap_s": round(max(b - a for a, b in itertools.pairwise(acks)), 2)
            if len(acks) > 1 else None,
            "longest_read_gap_s": round(max(b - a for a, b in itertools.pairwise(reads)), 2)
            if len(reads) > 1 else None}


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


