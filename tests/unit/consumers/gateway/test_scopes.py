"""Scoped keys at the gateway: each route's scope, the 403 that names it, revocation within
the reload interval, and the audit events routes ask for (tenant, key id, never the key).

The store is a dict and the audit events land in a list (tests/integration/
test_scopes_audit.py reads them back from the real tts.audit); the lifespan is not entered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from consumers.gateway import openapi, scopes
from consumers.gateway.app import Guard, build_app
from consumers.gateway.audit import AuditUnavailable
from consumers.gateway.keys import KeyRing, add_key, key_id, revoke_key
from consumers.gateway.openapi_components import ApiError
from consumers.gateway.runtime import Gateway
from consumers.settings import GatewaySettings, Settings
from pipeline import keys as object_keys
from pipeline.storage import ObjectStore
from tests.unit.consumers.gateway.auditlog import recorded
from tests.unit.consumers.gateway.memorystore import MemoryStore
from topics.events import AuditEvent, SynthesisRequest, VoiceRegistration, encode

NOW = [0.0]


@pytest.fixture
def store() -> MemoryStore:
    store = MemoryStore()
    voice = VoiceRegistration(voice_id="narrator", reference="s3://voicefactory/r.wav",
                              sha256="0" * 64, created_at="2031-01-01T00:00:00Z",
                              tenant="acme")
    store.objects[object_keys.voice_json_key("narrator", tenant="acme")] = encode(voice)
    return store


@pytest.fixture
def gateway(tmp_path: Path, store: MemoryStore) -> Gateway:
    NOW[0] = 0.0
    path = tmp_path / "keys"
    settings = Settings(gateway=GatewaySettings(keys_file=str(path)))
    return Gateway(settings, store=cast(ObjectStore, store),
                   keyring=KeyRing(path, reload_s=5, clock=lambda: NOW[0]))


@pytest.fixture
def audit(gateway: Gateway) -> list[AuditEvent]:
    return recorded(gateway)


@pytest.fixture
def http(gateway: Gateway) -> Iterator[TestClient]:
    yield TestClient(build_app(gateway), raise_server_exceptions=False)


def bearer(gateway: Gateway, *scope_names: str, tenant: str = "acme") -> dict[str, str]:
    key = add_key(gateway.keys.path, tenant, rate=1000, streams=2, scopes=scope_names)
    gateway.keys.refresh(force=True)
    return {"Authorization": f"Bearer {key}"}


def missing(answer: Any) -> str | None:
    """The scope a 403 names (checked against the published error type), or None."""
    if answer.status_code != 403:
        return None
    error = msgspec.json.decode(answer.content, type=ApiError).error  # the document's
    assert error.code == "missing_scope" and error.type == "invalid_request_error"
    assert isinstance(error.scope, str) and error.scope in error.message
    return error.scope


SCRIPT = {"job_id": "ep1", "voice": "narrator", "lines": [{"text": "Hello."}]}


def test_a_speech_key_reads_voices_but_writes_nothing(http: TestClient,
                                                       gateway: Gateway) -> None:
    auth = bearer(gateway, "speech")
    assert http.get("/v1/voices", headers=auth).status_code == 200
    assert http.get("/v1/voices/narrator", headers=auth).status_code == 200
    assert missing(http.post("/v1/voices", headers=auth, data={"voice_id": "x"},
                             files={"reference": ("r.wav", b"RIFF")})) == "voices:write"
    assert missing(http.delete("/v1/voices/narrator", headers=auth)) == "voices:write"
    assert missing(http.get("/v1/voices/narrator/reference", headers=auth)) == "voices:write"
    assert missing(http.post("/v1/jobs", json=SCRIPT, headers=auth)) == "jobs"
    assert missing(http.get("/v1/jobs/ep1", headers=auth)) == "jobs"
    assert missing(http.get("/v1/jobs/ep1/clips/0", headers=auth)) == "jobs"
    assert missing(http.get("/v1/fleet", headers=auth)) == "admin"


def test_a_voices_key_reads_voices_and_cannot_speak(http: TestClient, gateway: Gateway) -> None:
    auth = bearer(gateway, "voices:write")
    assert http.get("/v1/voices", headers=auth).status_code == 200
    speech = {"model": "tts-1", "input": "hi", "voice": "narrator"}
    assert missing(http.post("/v1/audio/speech", json=speech, headers=auth)) == "speech"


def test_admin_implies_nothing_else(http: TestClient, gateway: Gateway) -> None:
    auth = bearer(gateway, "admin")
    assert http.get("/v1/fleet", headers=auth).status_code == 200
    assert missing(http.get("/v1/voices", headers=auth)) == "speech"  # the first accepted


def test_a_scope_refusal_comes_before_the_body_is_read_and_costs_no_token(
        http: TestClient, gateway: Gateway) -> None:
    key = add_key(gateway.keys.path, "acme", rate=1, streams=1, scopes=["speech"])
    gateway.keys.refresh(force=True)
    auth = {"Authorization": f"Bearer {key}"}
    for _ in range(3):  # a rate of 1/s: a counted refusal would be 429 by now
        assert missing(http.post("/v1/jobs", content=b"not json", headers=auth)) == "jobs"


def test_every_api_route_declares_its_scope(gateway: Gateway) -> None:
    app = cast(Guard, build_app(gateway)).app
    undeclared = [(m, r.path) for r in app.routes if isinstance(r, Route)
                  and r.path.startswith("/v1/") for m in (r.methods or set()) - {"HEAD"}
                  if (m, scopes._CONVERTER.sub(r"{\1}", r.path)) not in scopes.ROUTE_SCOPES]
    assert undeclared == []
    assert scopes.needed("GET", "/v1/a-route-nobody-declared") == ("admin",)  # fail closed


def test_the_document_names_each_operations_scopes() -> None:
    paths = openapi.document()["paths"]
    assert paths["/v1/voices/{id}"]["delete"]["x-vf-scopes"] == ["voices:write"]
    assert paths["/v1/voices"]["get"]["x-vf-scopes"] == ["speech", "voices:write"]
    assert paths["/v1/jobs/{id}/clips/{index}"]["get"]["x-vf-scopes"] == ["jobs"]
    assert "x-vf-scopes" not in paths["/openapi.json"]["get"]


def test_a_revoked_key_is_refused_within_the_reload_interval(http: TestClient,
                                                              gateway: Gateway) -> None:
    auth = bearer(gateway, "speech")
    key = auth["Authorization"].removeprefix("Bearer ")
    revoke_key(gateway.keys.path, key_id(key))
    NOW[0] = 4.0  # the file is not re-read yet: the window VF_GATEWAY_KEYS_RELOAD_S allows
    assert http.get("/v1/voices", headers=auth).status_code == 200
    NOW[0] = 5.0
    answer = http.get("/v1/voices", headers=auth)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    assert answer.json()["error"]["message"] == "API key revoked"


def test_a_job_submission_is_audited_with_the_key_id_and_never_the_key(
        http: TestClient, gateway: Gateway, audit: list[AuditEvent]) -> None:
    auth = bearer(gateway, "jobs", tenant="acme")
    produced: list[SynthesisRequest] = []

    async def produce(topic: str, requests: list[SynthesisRequest],
                      partition: int | None = None) -> None:
        produced.extend(requests)

    gateway.produce = produce  # type: ignore[method-assign]
    answer = http.post("/v1/jobs", json=SCRIPT, headers={**auth, "X-Request-Id": "req-1"})
    assert answer.status_code == 202, answer.text
    key = auth["Authorization"].removeprefix("Bearer ")
    [event] = audit
    assert (event.tenant, event.action, event.object) == ("acme", "job.submit", "ep1")
    assert event.key_id == key_id(key) and event.request_id == "req-1"
    assert event.client == "testclient" and event.time.endswith("Z")
    assert key not in encode(event).decode() and produced


def test_an_unwritable_audit_refuses_the_action(http: TestClient, gateway: Gateway,
                                                store: MemoryStore) -> None:
    async def down(event: AuditEvent) -> None:
        raise AuditUnavailable(f"the audit trail is unavailable: {event.action} refused")

    gateway.audit.send = down  # type: ignore[method-assign]
    auth = bearer(gateway, "voices:write", "jobs")
    answer = http.delete("/v1/voices/narrator", headers=auth)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "audit_unavailable"
    assert store.get(object_keys.voice_json_key("narrator", tenant="acme")) is not None
    assert http.post("/v1/jobs", json=SCRIPT, headers=auth).status_code == 503
    assert store.get(object_keys.job_script_key("ep1", tenant="acme")) is not None  # stored


def test_a_delete_of_an_unknown_voice_is_not_audited(http: TestClient, gateway: Gateway,
                                                    audit: list[AuditEvent]) -> None:
    answer = http.delete("/v1/voices/nobody", headers=bearer(gateway, "voices:write"))
    assert answer.status_code == 404 and audit == []


def test_a_malformed_request_id_header_is_left_out() -> None:
    from consumers.gateway.audit import caller_request_id
    assert caller_request_id("req-1") == "req-1"
    assert caller_request_id("../etc") is None and caller_request_id("x" * 200) is None
    assert caller_request_id(None) is None
