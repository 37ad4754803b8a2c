"""Scoped keys and the audit trail over the real stack (Kafka + S3), and the ops port.

Keys are made and revoked with the CLI (`voicefactory gateway keys add|revoke`), whose
key.add / key.revoke events go to the test's own tts.audit; the gateway runs in-process
(gateway_harness.RunningGateway: API and ops listener on loopback). A key without a route's
scope gets 403 naming it; a revoked key gets 401 within the reload interval; every audited
action is read back from tts.audit with its tenant and key id and no key material.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition

import voicefactory
from consumers.clients.audit import tail_audit
from consumers.clients.demo import REFERENCE_TEXT, make_consent, make_reference
from consumers.gateway.keys import KeyRing, key_id
from consumers.kafka import make_consumer
from consumers.settings import GatewaySettings, Settings
from tests.integration.gateway_harness import RunningGateway
from topics.events import AuditEvent, decode_audit
from topics.specs import AUDIT

pytestmark = pytest.mark.integration

RELOAD_S = 0.5


@pytest.fixture
def gw_settings(settings: Settings, tmp_path: Path) -> Settings:
    prefix = settings.kafka.topic_prefix
    return Settings(kafka=settings.kafka, store=settings.store, worker=settings.worker,
                    gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                            group_id=f"vf-gateway-{prefix}",
                                            keys_reload_s=RELOAD_S))


async def cli(settings: Settings, *args: str, capsys: pytest.CaptureFixture[str],
              ) -> tuple[int, str, str]:
    """`voicefactory gateway ... keys ARGS` against the test's broker, prefix and keys file."""
    argv = ["gateway", "--bootstrap", settings.kafka.bootstrap, "--topic-prefix",
            settings.kafka.topic_prefix, "--keys-file", settings.gateway.keys_file,
            "keys", *args]
    code = await asyncio.to_thread(voicefactory.main, argv)
    out, err = capsys.readouterr()
    return code, out, err


async def audit_events(settings: Settings, count: int, timeout_s: float = 20) -> list[bytes]:
    """The raw values on tts.audit, from the beginning, until `count` arrived."""
    topic = settings.kafka.topic_prefix + AUDIT.name
    consumer = make_consumer(settings.kafka, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(AUDIT.partitions)])
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=250)).values():
                values += [r.value or b"" for r in batch]
    finally:
        await consumer.stop()
    return values


def refused_for(answer: httpx.Response) -> str | None:
    if answer.status_code != 403:
        return None
    error = answer.json()["error"]
    assert error["code"] == "missing_scope" and error["scope"] in error["message"]
    return str(error["scope"])


async def test_scopes_revocation_and_the_audit_trail(
        gw_settings: Settings, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, speaker, err = await cli(gw_settings, "add", "acme", "--scopes", "speech",
                                   capsys=capsys)
    assert code == 0 and "audit: key.add" in err, err
    code, writer, _ = await cli(gw_settings, "add", "acme", "--scopes", "voices:write,jobs",
                                capsys=capsys)
    speaker, writer = speaker.strip(), writer.strip()
    say, write = ({"Authorization": f"Bearer {k}"} for k in (speaker, writer))
    reference = make_reference(tmp_path / "ref.wav")
    consent = make_consent(tmp_path / "consent.wav")  # the same espeak-ng speaker

    async def upload(headers: dict[str, str]) -> httpx.Response:
        return await http.post("/v1/voices", headers=headers,
                               files={"reference": ("ref.wav", reference),
                                      "consent_recording": ("c.wav", consent)},
                               data={"voice_id": "acme-narrator", "transcript": REFERENCE_TEXT})

    keys = KeyRing(Path(gw_settings.gateway.keys_file), reload_s=RELOAD_S)
    async with RunningGateway(gw_settings, keys) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        # Wrong scope: 403 naming it, nothing stored or produced.
        assert refused_for(await upload(say)) == "voices:write"
        assert refused_for(await http.get("/v1/fleet", headers=write)) == "admin"
        assert refused_for(await http.post("/v1/jobs", headers=say, json={
            "job_id": "ep1", "voice": "acme-narrator", "lines": [{"text": "Hi."}]})) == "jobs"
        # The right scope: each action audited.
        created = await upload({**write, "X-Request-Id": "up-1"})
        assert created.status_code == 201, created.text
        assert (await http.get("/v1/voices/acme-narrator", headers=say)).status_code == 200
        job = await http.post("/v1/jobs", headers=write, json={  # the tenant's own voice
            "job_id": "ep1", "voice": "acme-narrator", "lines": [{"text": "Hello there."}]})
        assert job.status_code == 202, job.text
        assert refused_for(await http.delete("/v1/voices/acme-narrator", headers=say)) \
            == "voices:write"
        assert (await http.delete("/v1/voices/acme-narrator", headers=write)).status_code \
            == 200
        # The ops listener, and nothing of it on the API port.
        assert (await http.get("/metrics")).status_code == 404
        metrics = (await http.get(gw.ops_url + "/metrics")).text
        assert 'vf_gateway_audit_events_total{action="voice.create",result="ok"} 1.0' \
            in metrics
        # Revoked: refused within the reload interval.
        assert (await http.get("/v1/voices", headers=say)).status_code == 200
        code, _, err = await cli(gw_settings, "revoke", key_id(speaker), capsys=capsys)
        assert code == 0 and "audit: key.revoke" in err, err
        revoked_at = time.monotonic()
        while (answer := await http.get("/v1/voices", headers=say)).status_code == 200:
            assert time.monotonic() - revoked_at < RELOAD_S + 1.0, "still accepted"
            await asyncio.sleep(0.05)
        took = time.monotonic() - revoked_at
        assert answer.status_code == 401 and answer.json()["error"]["message"] == \
            "API key revoked"
        print(f"revoked key refused {took:.2f} s after `keys revoke` (reload {RELOAD_S} s)")
        assert (await http.get("/v1/voices", headers=write)).status_code == 200

    raw = await audit_events(gw_settings, 6)
    events = sorted((decode_audit(v) for v in raw), key=lambda e: e.time)
    assert [(e.action, e.object) for e in events] == [
        ("key.add", key_id(speaker)), ("key.add", key_id(writer)),
        ("voice.create", "acme-narrator"), ("job.submit", "ep1"),
        ("voice.delete", "acme-narrator"), ("key.revoke", key_id(speaker))]
    assert {e.tenant for e in events} == {"acme"}
    by_gateway: list[AuditEvent] = [e for e in events if not e.action.startswith("key.")]
    assert {e.key_id for e in by_gateway} == {key_id(writer)}
    assert {e.client for e in by_gateway} == {"127.0.0.1"}
    assert by_gateway[0].request_id == "up-1"
    by_cli = [e for e in events if e.action.startswith("key.")]
    assert all(e.key_id is None and (e.client or "").startswith("cli:") for e in by_cli)
    for key in (speaker, writer):  # no key material: not the key, not its full hash
        digest = hashlib.sha256(key.encode()).hexdigest()
        assert not any(key.encode() in v or digest.encode() in v for v in raw)
    # `audit tail` reads the same trail, filtered by tenant.
    out = io.StringIO()
    assert await tail_audit(gw_settings, from_beginning=True, out=out, tenant="acme",
                            idle_s=3) == 6
    assert "voice.delete" in out.getvalue() and f"key={key_id(writer)}" in out.getvalue()
    assert await tail_audit(gw_settings, from_beginning=True, out=io.StringIO(),
                            tenant="rival", idle_s=2) == 0
