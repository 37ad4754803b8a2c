"""GET /v1/usage and monthly quotas, over published reports in a memory store (no Kafka: the
app's lifespan is not entered; tests/integration/test_usage.py has the aggregator write them
on the real stack)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from consumers.gateway.app import build_app
from consumers.gateway.keys import KeyRing, Tenant, add_key
from consumers.gateway.runtime import Gateway
from consumers.gateway.usage import UsageBook, over_quota
from consumers.settings import GatewaySettings, Settings
from pipeline.keys import usage_key
from pipeline.storage import ObjectStore
from pipeline.usage import UsageReport, current_month, encode_report, report_source
from tests.unit.consumers.gateway.auditlog import recorded
from tests.unit.consumers.gateway.memorystore import MemoryStore
from topics.events import SynthesisRequest, VoiceRegistration, encode

SOURCE = report_source("")  # the default topic prefix: vf-aggregator


def _publish(store: MemoryStore, tenant: str, partition: int, audio_s: float,
             month: str | None = None) -> None:
    month = month or current_month()
    store.put(usage_key(month, SOURCE, partition, tenant=tenant), encode_report(UsageReport(
        tenant=tenant, month=month, partition=partition, audio_s=audio_s,
        engine_s=audio_s / 4, requests=2, updated_at=f"{month}-02T03:04:05.000Z")),
        "application/json")


@pytest.fixture
def store() -> MemoryStore:
    memory = MemoryStore()
    for tenant in ("acme", "rival"):
        memory.put(f"tenants/{tenant}/voices/narrator-1/voice.json", encode(VoiceRegistration(
            voice_id="narrator-1", reference="s3://voicefactory/x.wav", sha256="0" * 64,
            created_at="2026-01-01T00:00:00Z", tenant=tenant)), "application/json")
    memory.put("voices/narrator-1/voice.json", encode(VoiceRegistration(
        voice_id="narrator-1", reference="s3://voicefactory/x.wav", sha256="0" * 64,
        created_at="2026-01-01T00:00:00Z")), "application/json")
    return memory


@pytest.fixture
def gateway(tmp_path: Path, store: MemoryStore) -> Gateway:
    keys = tmp_path / "keys"
    settings = Settings(gateway=GatewaySettings(keys_file=str(keys), usage_cache_s=0))
    fake: ObjectStore = store  # type: ignore[assignment]
    return Gateway(settings, keyring=KeyRing(keys), store=fake)


@pytest.fixture
def http(gateway: Gateway) -> Iterator[TestClient]:
    yield TestClient(build_app(gateway), raise_server_exceptions=False)


def _key(gateway: Gateway, tmp_path: Path, tenant: str, quota: float | None = None) -> dict[
        str, str]:
    key = add_key(tmp_path / "keys", tenant, rate=1000, streams=2, monthly_audio_s=quota)
    gateway.keys.refresh(force=True)
    return {"Authorization": f"Bearer {key}"}


def test_usage_is_the_callers_own_tenants_sum_of_partitions(
        http: TestClient, gateway: Gateway, tmp_path: Path, store: MemoryStore) -> None:
    acme = _key(gateway, tmp_path, "acme", quota=100)
    rival = _key(gateway, tmp_path, "rival")
    _publish(store, "acme", 0, 10.0)
    _publish(store, "acme", 7, 2.5)
    _publish(store, "rival", 0, 40.0)
    _publish(store, "acme", 1, 99.0, month="2020-01")
    body = http.get("/v1/usage", headers=acme).json()
    assert body == {"object": "usage", "tenant": "acme", "month": current_month(),
                    "audio_seconds": 12.5, "engine_seconds": 3.125, "requests": 4,
                    "updated_at": f"{current_month()}-02T03:04:05.000Z",
                    "monthly_audio_seconds": 100.0, "remaining_audio_seconds": 87.5}
    mine = http.get("/v1/usage", headers=rival).json()
    assert (mine["tenant"], mine["audio_seconds"], mine["monthly_audio_seconds"],
            mine["remaining_audio_seconds"]) == ("rival", 40.0, None, None)
    old = http.get("/v1/usage?month=2020-01", headers=acme).json()
    assert (old["month"], old["audio_seconds"]) == ("2020-01", 99.0)
    empty = http.get("/v1/usage?month=2020-02", headers=rival).json()
    assert (empty["audio_seconds"], empty["requests"], empty["updated_at"]) == (0.0, 0, None)


@pytest.mark.parametrize("month", ["2026-13", "26-01", "2026-1", "../x", "2026-01/"])
def test_a_malformed_month_is_a_400_naming_it(http: TestClient, gateway: Gateway,
                                              tmp_path: Path, month: str) -> None:
    answer = http.get("/v1/usage", params={"month": month},
                      headers=_key(gateway, tmp_path, "acme"))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "month"


def test_usage_needs_a_key(http: TestClient) -> None:
    assert http.get("/v1/usage").status_code == 401


def test_speech_and_jobs_over_the_quota_are_429_quota_exceeded_until_the_month_ends(
        http: TestClient, gateway: Gateway, tmp_path: Path, store: MemoryStore,
        produced: list[SynthesisRequest]) -> None:
    acme = _key(gateway, tmp_path, "acme", quota=30)
    _publish(store, "acme", 0, 20.0)
    _publish(store, "acme", 3, 10.0)  # exactly the quota: used up
    speech = http.post("/v1/audio/speech", headers=acme,
                       json={"model": "tts-1", "voice": "narrator-1", "input": "Hi."})
    assert speech.status_code == 429, speech.text
    error = speech.json()["error"]
    assert error["code"] == "quota_exceeded" and "30 of its 30 audio seconds" in \
        error["message"]
    assert 1 <= int(speech.headers["Retry-After"]) <= 31 * 86400 + 1
    script = {"job_id": "ep1", "voice": "narrator-1", "lines": [{"text": "Hello."}]}
    job = http.post("/v1/jobs", json=script, headers=acme)
    assert job.status_code == 429 and job.json()["error"]["code"] == "quota_exceeded"
    assert "jobs/ep1/script.json" not in " ".join(store.objects)  # nothing stored
    rerun = http.post("/v1/jobs/ep1/rerun", json={"failed": True}, headers=acme)
    assert rerun.status_code == 429
    assert produced == []


def test_under_the_quota_or_without_one_nothing_is_refused(
        http: TestClient, gateway: Gateway, tmp_path: Path, store: MemoryStore,
        produced: list[SynthesisRequest]) -> None:
    _publish(store, "acme", 0, 29.5)
    _publish(store, "rival", 0, 10_000.0)
    script = {"job_id": "ep1", "voice": "narrator-1", "lines": [{"text": "Hello."}]}
    audited = recorded(gateway)
    for headers in (_key(gateway, tmp_path, "acme", quota=30), _key(gateway, tmp_path, "rival")):
        answer = http.post("/v1/jobs", json=script, headers=headers)
        assert answer.status_code == 202, answer.text
    assert len(produced) == 2
    assert [(e.action, e.tenant) for e in audited] == [("job.submit", "acme"),
                                                       ("job.submit", "rival")]


async def test_the_retry_after_runs_to_the_start_of_the_next_utc_month() -> None:
    store = MemoryStore()
    _publish(store, "acme", 0, 5.0, month="2031-12")
    fake: ObjectStore = store  # type: ignore[assignment]
    book = UsageBook(fake, SOURCE, ttl_s=60)
    tenant = Tenant("acme", 10, 2, monthly_audio_s=5)
    over = await over_quota(book, tenant, now=datetime(2031, 12, 31, 23, 59, 0, tzinfo=UTC))
    assert over is not None and over.headers["Retry-After"] == "61"
    assert "resets at 2032-01-01T00:00:00Z" in bytes(over.body).decode()
    # a new month starts from zero
    assert await over_quota(book, tenant, now=datetime(2032, 1, 1, 0, 0, 1, tzinfo=UTC)) is None


async def test_the_book_reads_the_store_at_most_once_per_ttl() -> None:
    store = MemoryStore()
    fake: ObjectStore = store  # type: ignore[assignment]
    clock = [0.0]
    book = UsageBook(fake, SOURCE, ttl_s=5, clock=lambda: clock[0])
    assert (await book.get("acme", "2031-12")).audio_s == 0
    _publish(store, "acme", 0, 5.0, month="2031-12")
    clock[0] = 4.9
    assert (await book.get("acme", "2031-12")).audio_s == 0  # cached
    clock[0] = 5.0
    assert (await book.get("acme", "2031-12")).audio_s == 5.0
