"""The gateway on the real stack, driven by the official `openai` SDK (base_url + key only).

Kafka and S3 are real; the worker is `FakeStreamingWorker` (gateway_harness.py) until the
streaming worker lands: these tests check the gateway's half of the contract (requests on
tts.requests.interactive with a reply partition, chunk records read back, cancels on
tts.control). tests/integration/test_gateway_e2e.py runs the real worker.
"""

from __future__ import annotations

import asyncio
import io
import logging
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from aiokafka import TopicPartition

from consumers.gateway.keys import KeyRing, add_key
from consumers.kafka import make_consumer
from consumers.settings import GatewaySettings, Settings
from tests.integration.gateway_harness import FAKE_RATE, FakeStreamingWorker, RunningGateway
from topics.chunks import SEQ
from topics.control import decode_control
from topics.events import ControlCommand
from topics.specs import CONTROL, REQUESTS, REQUESTS_INTERACTIVE, VOICES

pytestmark = pytest.mark.integration


@pytest.fixture
def gw_settings(settings: Settings, tmp_path: Path) -> Settings:
    prefix = settings.kafka.topic_prefix
    return Settings(kafka=settings.kafka, store=settings.store, worker=settings.worker,
                    gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                            group_id=f"vf-gateway-{prefix}", timeout_s=20.0,
                                            lag_interval_s=0.5))


@pytest.fixture
def api_key(gw_settings: Settings) -> str:
    return add_key(gw_settings.gateway.keys_path(), "default", rate=1000, streams=50)


@pytest.fixture
async def gateway(gw_settings: Settings, api_key: str) -> AsyncIterator[RunningGateway]:
    async with RunningGateway(gw_settings, KeyRing(gw_settings.gateway.keys_path())) as gw:
        yield gw


def client(gw: RunningGateway, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)


async def produced(settings: Settings, topic: str, partitions: int) -> int:
    consumer = make_consumer(settings.kafka, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(settings.kafka.topic_prefix + topic, p) for p in range(partitions)]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


async def test_whole_file_and_streams_through_the_sdk(gateway: RunningGateway, api_key: str,
                                                      gw_settings: Settings,
                                                      voice: str) -> None:
    async with FakeStreamingWorker(gw_settings) as fake:
        sdk = client(gateway, api_key)
        whole = await sdk.audio.speech.create(model="tts-1", voice=voice, input="Hello there.",
                                              response_format="wav")
        with wave.open(io.BytesIO(whole.content)) as w:
            assert w.getframerate() == FAKE_RATE
            assert w.getnframes() == int(0.3 * FAKE_RATE) * 3 + int(0.1 * FAKE_RATE)
        async with sdk.audio.speech.with_streaming_response.create(
                model="tts-1", voice={"id": voice}, input="Hello again.",
                response_format="pcm", stream_format="audio") as response:
            pcm = b"".join([piece async for piece in response.iter_bytes()])
        assert abs(len(pcm) / 2 / 24_000 - 1.0) < 0.01  # resampled to OpenAI's 24 kHz
        async with sdk.audio.speech.with_streaming_response.create(
                model="tts-1", voice=voice, input="Please restart once.",
                response_format="pcm", stream_format="audio") as response:
            pcm = b"".join([piece async for piece in response.iter_bytes()])
        assert abs(len(pcm) / 2 / 24_000 - 0.4) < 0.01  # attempt b continued, not doubled
        request, partition = fake.seen[0]
        assert request.stream and partition in gateway.gateway.router.partitions
        assert request.metadata is not None and request.metadata["tenant"] == "default"


async def test_sse_events_and_a_failed_request(gateway: RunningGateway, api_key: str,
                                               gw_settings: Settings, voice: str) -> None:
    async with FakeStreamingWorker(gw_settings), httpx.AsyncClient(base_url=gateway.url) as http:
        auth = {"Authorization": f"Bearer {api_key}"}
        body = {"model": "tts-1", "voice": voice, "input": "Hi.", "stream_format": "sse",
                "response_format": "mp3"}
        response = await http.post("/v1/audio/speech", json=body, headers=auth, timeout=30)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.text.split("\n\n") if line]
        assert all(e.startswith("data: ") for e in events)
        assert '"speech.audio.delta"' in events[0] and '"speech.audio.done"' in events[-1]
        failed = await http.post("/v1/audio/speech", headers=auth, timeout=30,
                                 json={**body, "input": "this will fail", "stream_format": None})
        assert failed.status_code == 502
        assert failed.json()["error"]["code"] == "engine_error"


async def test_hostile_requests_get_4xx_and_nothing_reaches_kafka(
        gateway: RunningGateway, api_key: str, gw_settings: Settings, voice: str) -> None:
    auth = {"Authorization": f"Bearer {api_key}"}
    good = {"model": "tts-1", "voice": voice, "input": "Hello."}
    cases: list[tuple[dict[str, object], int, str]] = [
        ({"content": b"{not json", "headers": auth}, 400, "invalid_json"),
        ({"json": {**good, "input": "x" * 4097}, "headers": auth}, 400, "4,096"),
        ({"json": {**good, "voice": "nobody"}, "headers": auth}, 404, "voice_not_found"),
        ({"json": {**good, "voice": "../etc/passwd"}, "headers": auth}, 400, "voice"),
        ({"json": {**good, "voice": {"id": "a/b"}}, "headers": auth}, 400, "voice"),
        ({"json": {**good, "speed": 3.0}, "headers": auth}, 400, "0.5-2.0"),
        ({"json": {**good, "response_format": "ogg"}, "headers": auth}, 400, "response_format"),
        ({"json": good}, 401, "missing API key"),
        ({"json": good, "headers": {"Authorization": "Bearer vf-wrong"}}, 401, "invalid API key"),
        ({"content": b"{" + b" " * (2 * 1024 * 1024) + b"}", "headers": auth}, 413, "limit"),
    ]
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        async def one(kwargs: dict[str, object], status: int, reason: str) -> None:
            response = await http.post("/v1/audio/speech", **kwargs)  # type: ignore[arg-type]
            assert response.status_code == status, (kwargs.get("json"), response.text)
            assert reason in response.text

        for _ in range(100):  # 1,000 hostile requests, ten at a time
            await asyncio.gather(*(one(*case) for case in cases))
        huge = await http.post("/v1/voices", headers=auth,
                               files={"reference": ("big.wav", b"\0" * (100 * 1024 * 1024))})
        assert huge.status_code == 413 and "20,971,520" in huge.text
        not_audio = await http.post("/v1/voices", headers=auth,
                                    files={"reference": ("x.wav", b"not audio at all")},
                                    data={"voice_id": "v2"})
        assert not_audio.status_code == 422
        assert any(c["rule"] == "decodable" and not c["ok"]
                   for c in not_audio.json()["checks"])
        ready = await http.get(gateway.ops_url + "/readyz")
        assert ready.status_code == 200
        assert (await http.get("/readyz")).status_code == 404  # not on the API port
    assert await produced(gw_settings, REQUESTS_INTERACTIVE.name,
                          REQUESTS_INTERACTIVE.partitions) == 0


@pytest.mark.parametrize("stream_format", ["audio", None])
async def test_a_client_that_leaves_cancels_its_request(gateway: RunningGateway, api_key: str,
                                                        gw_settings: Settings, voice: str,
                                                        stream_format: str | None) -> None:
    async with FakeStreamingWorker(gw_settings) as fake, \
            httpx.AsyncClient(base_url=gateway.url) as http:
        body = {"model": "tts-1", "voice": voice, "input": "slow please",
                "stream_format": stream_format, "response_format": "pcm"}
        auth = {"Authorization": f"Bearer {api_key}"}
        if stream_format is not None:
            async with http.stream("POST", "/v1/audio/speech", json=body, timeout=30,
                                   headers=auth) as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    break  # one piece of audio, then hang up
        else:  # the whole file: the client gives up waiting for it
            with pytest.raises(httpx.ReadTimeout):
                await http.post("/v1/audio/speech", json=body, headers=auth, timeout=1.5)
        [(request, _)] = fake.seen
    consumer = make_consumer(gw_settings.kafka, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(gw_settings.kafka.topic_prefix + CONTROL.name, p)
                         for p in range(CONTROL.partitions)])
        deadline = asyncio.get_running_loop().time() + 10
        cancels: list[ControlCommand] = []
        while not cancels and asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                cancels += [decode_control(r.value) for r in records]
        assert [c.request_id for c in cancels] == [request.request_id]
        assert cancels[0].action == "cancel"
    finally:
        await consumer.stop()
    await asyncio.sleep(0.2)
    assert gateway.gateway.limiter.open_streams() == 0


async def test_two_replicas_share_the_reply_partitions_and_serve_20_streams(
        gw_settings: Settings, api_key: str, voice: str) -> None:
    keys = gw_settings.gateway.keys_path()
    async with RunningGateway(gw_settings, KeyRing(keys)) as one, \
            RunningGateway(gw_settings, KeyRing(keys)) as two, \
            FakeStreamingWorker(gw_settings) as fake:
        for _ in range(100):  # the second member's join rebalances the group
            mine, theirs = one.gateway.router.partitions, two.gateway.router.partitions
            if mine and theirs and len(mine) + len(theirs) == 12:
                break
            await asyncio.sleep(0.1)
        assert mine and theirs and not set(mine) & set(theirs)

        async def speak(gw: RunningGateway, i: int) -> int:
            async with client(gw, api_key).audio.speech.with_streaming_response.create(
                    model="tts-1", voice=voice, input=f"Line {i}.", response_format="pcm",
                    stream_format="audio") as response:
                return len(b"".join([p async for p in response.iter_bytes()]))

        sizes = await asyncio.gather(*(speak((one, two)[i % 2], i) for i in range(20)))
        assert all(abs(s / 2 / 24_000 - 1.0) < 0.01 for s in sizes)
        assert len(fake.seen) == 20
        owners = {p: gw for gw in (one, two) for p in gw.gateway.router.partitions}
        assert all(p is not None and p in owners for _, p in fake.seen)


async def test_a_lagging_lane_gets_503_with_retry_after(settings: Settings, tmp_path: Path,
                                                        voice: str) -> None:
    from consumers.kafka import make_producer

    prefix = settings.kafka.topic_prefix
    lagging = Settings(kafka=settings.kafka, store=settings.store, worker=settings.worker,
                       gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                               group_id=f"vf-gateway-{prefix}",
                                               lag_threshold=2, lag_interval_s=0.2))
    key = add_key(lagging.gateway.keys_path(), "default", rate=100, streams=5)
    producer = make_producer(settings.kafka)
    await producer.start()
    try:  # three requests nobody consumes: vf-synth's lag is 3
        for i in range(3):
            await producer.send_and_wait(prefix + REQUESTS_INTERACTIVE.name, b"{}",
                                         key=f"v{i}".encode())
    finally:
        await producer.stop()
    async with RunningGateway(lagging, KeyRing(lagging.gateway.keys_path())) as gw, \
            httpx.AsyncClient(base_url=gw.url) as http:
        for _ in range(50):
            if gw.gateway.lag.lag is not None:
                break
            await asyncio.sleep(0.1)
        assert gw.gateway.lag.lag == 3
        response = await http.post("/v1/audio/speech", headers={"Authorization": f"Bearer {key}"},
                                   json={"model": "tts-1", "voice": voice, "input": "Hi."})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert "3 requests behind" in response.json()["error"]["message"]
        assert "vf_gateway_interactive_lag 3.0" in (await http.get(gw.ops_url + "/metrics")).text


async def test_a_rebalance_mid_stream_does_not_strand_the_answer(
        gw_settings: Settings, api_key: str, voice: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="consumers.gateway.replies")
    keys = gw_settings.gateway.keys_path()
    async with RunningGateway(gw_settings, KeyRing(keys)) as one, \
            FakeStreamingWorker(gw_settings):
        async def speak() -> bytes:
            async with client(one, api_key).audio.speech.with_streaming_response.create(
                    model="tts-1", voice=voice, input="pause between chunks",
                    response_format="pcm", stream_format="audio") as response:
                return b"".join([p async for p in response.iter_bytes()])

        answers = [asyncio.create_task(speak()) for _ in range(6)]  # over most partitions
        await asyncio.sleep(1.0)
        async with RunningGateway(gw_settings, KeyRing(keys)) as two:  # takes some away
            pcm = await asyncio.gather(*answers)
            assert two.gateway.router.partitions
        assert all(abs(len(p) / 2 / 24_000 - 2.0) < 0.02 for p in pcm)
    assert "revoked with requests waiting: draining them" in caplog.text  # the path ran


async def test_a_chunk_the_reply_loop_missed_is_read_again(
        gateway: RunningGateway, api_key: str, gw_settings: Settings, voice: str,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever makes the fetch loop miss a record, the answer comes out whole: the stream
    holds what came after the hole and the router reads the partition again."""
    router = gateway.gateway.router
    dispatch, dropped = router._dispatch, set[str]()

    def lossy(records: list[Any]) -> None:  # the first delivery of every seq 1 goes missing
        kept = []
        for rec in records:
            if dict(rec.headers).get(SEQ) == b"1" and rec.key not in dropped:
                dropped.add(rec.key)
                continue
            kept.append(rec)
        dispatch(kept)

    monkeypatch.setattr(router, "_dispatch", lossy)
    speech = client(gateway, api_key).audio.speech.with_streaming_response
    async with FakeStreamingWorker(gw_settings), speech.create(
            model="tts-1", voice=voice, input="three chunks", response_format="pcm",
            stream_format="audio") as response:
        pcm = b"".join([p async for p in response.iter_bytes()])
    assert dropped and router.repairs == 1
    assert abs(len(pcm) / 2 / 24_000 - 1.0) < 0.01  # 3 x 0.3 s + 0.1 s, nothing missing
    assert "missed chunks: reading partition" in caplog.text


async def test_success_without_audio_is_an_error_not_an_empty_file(
        gateway: RunningGateway, api_key: str, gw_settings: Settings, voice: str) -> None:
    async with FakeStreamingWorker(gw_settings), \
            httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
        for stream_format in (None, "audio"):
            body = {"model": "tts-1", "voice": voice, "input": "silent please",
                    "response_format": "mp3"}
            if stream_format:
                body["stream_format"] = stream_format
            response = await http.post("/v1/audio/speech", json=body,
                                        headers={"Authorization": f"Bearer {api_key}"})
            assert response.status_code == 502, response.content[:80]
            assert response.json()["error"]["code"] == "no_audio"


async def test_voices_over_http_share_the_cli_registry(gateway: RunningGateway, api_key: str,
                                                       gw_settings: Settings,
                                                       tmp_path: Path) -> None:
    from consumers.clients.demo import REFERENCE_TEXT, make_consent, make_reference
    from consumers.wiring import make_store
    from pipeline.voices import list_voices

    reference = make_reference(tmp_path / "ref.wav")
    consent = make_consent(tmp_path / "consent.wav")
    auth = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=auth, timeout=60) as http:
        form = {"voice_id": "http-voice", "transcript": REFERENCE_TEXT, "language": "en"}
        unconsented = await http.post("/v1/voices", files={"reference": ("ref.wav", reference)},
                                      data=form)
        assert unconsented.status_code == 400
        assert unconsented.json()["error"]["code"] == "consent_required"
        created = await http.post("/v1/voices", data=form,
                                  files={"reference": ("ref.wav", reference),
                                         "consent_recording": ("consent.wav", consent)})
        assert created.status_code == 201, created.text
        assert created.json()["id"] == "http-voice"
        assert all(c["ok"] or c["advisory"] for c in created.json()["checks"])
        assert "http-voice" in [v.voice_id for v in list_voices(make_store(gw_settings.store))]
        listed = await http.get("/v1/voices")
        assert "http-voice" in [v["id"] for v in listed.json()["data"]]  # bucket is shared
        one = await http.get("/v1/voices/http-voice")
        assert one.json()["transcript"] == REFERENCE_TEXT
        assert (await http.get("/v1/voices/..")).status_code in (400, 404)
        assert (await http.get("/v1/voices/nobody")).status_code == 404
        silent = await http.post("/v1/voices", files={"reference": ("s.wav", _silence())},
                                 data={"voice_id": "quiet"})
        assert silent.status_code == 422
        assert [c["rule"] for c in silent.json()["checks"] if not c["ok"]] == ["not silent"]
        deleted = await http.delete("/v1/voices/http-voice")
        assert deleted.status_code == 200 and deleted.json()["deleted"]
        assert (await http.get("/v1/voices/http-voice")).status_code == 404
    voices = await produced(gw_settings, VOICES.name, VOICES.partitions)
    assert voices == 2  # the registration and its tombstone


def _silence() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 16000 * 5)
    return out.getvalue()


async def test_jobs_over_http(gateway: RunningGateway, api_key: str, gw_settings: Settings,
                              voice: str) -> None:
    script = {"job_id": "http-job-1", "lines": [{"voice": voice, "text": "One."},
                                                {"voice": voice, "text": "Two."}]}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30,
                                 headers={"Authorization": f"Bearer {api_key}"}) as http:
        created = await http.post("/v1/jobs", json=script)
        assert created.status_code == 202 and created.json()["total"] == 2
        assert (created.json()["status"], created.json()["version"]) == ("queued", 1)
        status = await http.get("/v1/jobs/http-job-1")
        assert status.json() == {"id": "http-job-1", "object": "job", "status": "running",
                                 "version": 1, "total": 2, "carried": 0, "done": 0,
                                 "succeeded": 0, "failed": 0, "progress_complete": True,
                                 "lines": []}
        await _answer_line(gw_settings, "http-job-1", 1, total=2, voice=voice)
        status = await http.get("/v1/jobs/http-job-1")
        assert (status.json()["done"], status.json()["succeeded"]) == (1, 1)
        bad = await http.post("/v1/jobs", json={"job_id": "j", "lines": [{"voice": voice}]})
        assert bad.status_code == 400 and "text" in bad.json()["error"]["message"]
        typo = await http.post("/v1/jobs", json={"job_id": "http-job-2", "lines": [
            {"voice": voice, "text": "One."}, {"voice": voice + "-typo", "text": "Two."}]})
        assert typo.status_code == 400 and typo.json()["error"]["code"] == "voice_not_found"
        assert typo.json()["voices"] == {voice + "-typo": [2]}
        assert (await http.get("/v1/jobs/http-job-2")).status_code == 404  # nothing stored
        assert (await http.get("/v1/jobs/nope")).status_code == 404

        # Once version 1 is finished (its job.json, as the aggregator writes it), the same
        # operation as `job run`: an edited script is version 2 with the changed line only.
        _finish_as_the_aggregator_would(gw_settings, "http-job-1", voice, ["One.", "Two."])
        revised = {**script, "lines": [script["lines"][0], {"voice": voice, "text": "Deux."}]}
        created = await http.post("/v1/jobs", json=revised)
        assert created.status_code == 202, created.text
        assert (created.json()["version"], created.json()["lines"]) == (2, [1])
        status = await http.get("/v1/jobs/http-job-1")
        assert (status.json()["status"], status.json()["version"],
                status.json()["carried"]) == ("running", 2, 1)
        _finish_as_the_aggregator_would(gw_settings, "http-job-1", voice, ["One.", "Deux."],
                                        version=2)
        same = await http.post("/v1/jobs", json=revised)
        assert (same.status_code, same.json()["status"], same.json()["version"]) == \
            (200, "unchanged", 2)
        assert (await http.get("/v1/jobs/http-job-1")).json()["version"] == 2

        # `job rerun` over HTTP (POST /v1/jobs/{id}/rerun): the same operation.
        nothing = await http.post("/v1/jobs/http-job-1/rerun", json={"failed": True})
        assert (nothing.status_code, nothing.json()["error"]["code"]) == \
            (409, "nothing_to_rerun")  # every line of version 2 has audio
        unknown = await http.post("/v1/jobs/http-job-9/rerun", json={"failed": True})
        assert unknown.status_code == 404
        rerun = await http.post("/v1/jobs/http-job-1/rerun", json={"lines": [0]})
        assert rerun.status_code == 202, rerun.text
        assert (rerun.json()["version"], rerun.json()["lines"]) == (3, [0])
        status = await http.get("/v1/jobs/http-job-1")
        assert (status.json()["status"], status.json()["version"],
                status.json()["carried"]) == ("running", 3, 1)
        still_open = await http.post("/v1/jobs/http-job-1/rerun", json={"lines": [1]})
        assert still_open.status_code == 409 and "still open" in still_open.text
    # 2 lines of version 1, 1 of version 2, 1 of version 3: nothing else
    assert await produced(gw_settings, REQUESTS.name, REQUESTS.partitions) == 4


def _finish_as_the_aggregator_would(settings: Settings, job_id: str, voice: str,
                                    texts: list[str], version: int = 1) -> None:
    from consumers.wiring import make_store
    from pipeline.keys import job_json_key
    from topics.events import AudioRef, JobClip, JobCompleted, encode

    clips = [JobClip(index=i, request_id=f"{job_id}-{i:04d}", voice_id=voice, text=t,
                     status="succeeded", duration_s=1.0, version=1,
                     audio=AudioRef(bucket=settings.store.bucket, key=f"audio/x/{i}.wav",
                                    url="u", format="wav", sample_rate=24000,
                                    duration_s=1.0, bytes=1, sha256="0" * 64))
             for i, t in enumerate(texts)]
    event = JobCompleted(job_id=job_id, status="succeeded", total=len(texts), clips=clips,
                         timeline=[], completed_at="2026-01-01T00:00:00Z", version=version)
    make_store(settings.store).put(job_json_key(job_id, version), encode(event),
                                   "application/json")


async def test_a_replica_killed_mid_stream_fails_its_clients_only(
        gw_settings: Settings, api_key: str, voice: str) -> None:
    """`voicefactory gateway` in a subprocess, killed with -9 while streaming: its clients
    get an error, the in-process replica's streams complete."""
    import signal

    from tests.integration.gateway_harness import cli_gateway

    async with cli_gateway(gw_settings) as (proc, doomed_url), \
            RunningGateway(gw_settings, KeyRing(gw_settings.gateway.keys_path())) as two, \
            FakeStreamingWorker(gw_settings):
        flowing = [asyncio.Event() for _ in range(6)]

        async def speak(base_url: str, first: asyncio.Event) -> int:
            sdk = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key,
                                     max_retries=0)
            size = 0
            async with sdk.audio.speech.with_streaming_response.create(
                    model="tts-1", voice=voice, input="pause between chunks",
                    response_format="pcm", stream_format="audio") as response:
                async for piece in response.iter_bytes():
                    size += len(piece)
                    first.set()
            return size

        doomed = [asyncio.create_task(speak(doomed_url, e)) for e in flowing[:3]]
        alive = [asyncio.create_task(speak(two.url, e)) for e in flowing[3:]]
        # Killed once every stream has audio flowing (a fixed sleep was too short on a
        # loaded machine: the kill then came before the answers started).
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in flowing)), 20)
        proc.send_signal(signal.SIGKILL)
        outcomes = await asyncio.gather(*doomed, return_exceptions=True)
        # The SDK's transport (httpx2) reports the cut connection mid-body.
        assert all(type(o).__name__ in ("RemoteProtocolError", "ReadError")
                   for o in outcomes), outcomes
        sizes = await asyncio.gather(*alive)
        assert all(abs(s / 2 / 24_000 - 2.0) < 0.02 for s in sizes)


async def _answer_line(settings: Settings, job_id: str, index: int, *, total: int,
                       voice: str) -> None:
    """A result of one job line on tts.results, keyed by the job ID (what a worker writes)."""
    from consumers.kafka import make_producer
    from topics.events import JobRef, SynthesisResult, encode

    result = SynthesisResult(request_id=f"{job_id}-{index:04d}", voice_id=voice,
                             status="succeeded", completed_at="2026-01-01T00:00:00+00:00",
                             job=JobRef(id=job_id, index=index, total=total))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(settings.kafka.topic_prefix + "tts.results", encode(result),
                                     key=result.result_key())
    finally:
        await producer.stop()
