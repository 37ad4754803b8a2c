"""The guard in front of the routes: auth, rate, body limits, metrics, logs without keys.

No Kafka here: these refusals all happen before a route runs (the app's lifespan, which
starts the Kafka clients, is not entered); tests/integration/test_gateway.py covers the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from consumers.gateway.app import build_app, route_label
from consumers.gateway.keys import KeyRing, add_key
from consumers.gateway.ops import PortRouter, build_ops_app
from consumers.gateway.runtime import Gateway
from consumers.settings import GatewaySettings, Settings


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    return tmp_path / "keys"


@pytest.fixture
def gateway(keys_file: Path) -> Gateway:
    settings = Settings(gateway=GatewaySettings(keys_file=str(keys_file), max_body_bytes=1000,
                                                max_upload_bytes=5000))
    return Gateway(settings, keyring=KeyRing(keys_file))


@pytest.fixture
def http(gateway: Gateway) -> Iterator[TestClient]:
    yield TestClient(build_app(gateway), raise_server_exceptions=False)


def key_for(gateway: Gateway, tenant: str = "acme", rate: float = 100) -> str:
    key = add_key(gateway.keys.path, tenant, rate=rate, streams=2)
    gateway.keys.refresh(force=True)
    return key


def test_no_key_or_a_wrong_key_is_401_with_a_reason(http: TestClient, gateway: Gateway) -> None:
    key_for(gateway)
    missing = http.post("/v1/audio/speech", json={})
    assert missing.status_code == 401 and "Bearer" in missing.json()["error"]["message"]
    wrong = http.post("/v1/audio/speech", json={}, headers={"Authorization": "Bearer vf-no"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    basic = http.get("/v1/voices", headers={"Authorization": "Basic dXNlcg=="})
    assert basic.status_code == 401


def test_the_rate_limit_answers_429_with_retry_after(http: TestClient, gateway: Gateway) -> None:
    key = key_for(gateway, rate=1)
    auth = {"Authorization": f"Bearer {key}"}
    first = http.post("/v1/audio/speech", content=b"{", headers=auth)
    assert first.status_code == 400  # admitted, then the route refused the JSON
    second = http.post("/v1/audio/speech", content=b"{", headers=auth)
    assert second.status_code == 429 and second.headers["retry-after"] == "1"


def test_bodies_over_the_limit_are_refused_declared_or_streamed(http: TestClient,
                                                               gateway: Gateway) -> None:
    auth = {"Authorization": f"Bearer {key_for(gateway)}"}
    declared = http.post("/v1/audio/speech", content=b"x" * 1001, headers=auth)
    assert declared.status_code == 413 and "1,000" in declared.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 100

    streamed = http.post("/v1/audio/speech", content=chunks(), headers=auth)
    assert streamed.status_code == 413
    upload = http.post("/v1/voices", content=b"x" * 4000, headers={
        **auth, "Content-Type": "multipart/form-data; boundary=b"})
    assert upload.status_code != 413  # uploads have their own, larger limit
    too_big = http.post("/v1/voices", content=b"x" * 5001, headers=auth)
    assert too_big.status_code == 413

    def parts() -> Iterator[bytes]:  # a chunked multipart upload that grows past the limit
        yield b'--b\r\nContent-Disposition: form-data; name="reference"; filename="r.wav"\r\n\r\n'
        for _ in range(60):
            yield b"x" * 100

    upload_chunked = http.post("/v1/voices", content=parts(), headers={
        **auth, "Content-Type": "multipart/form-data; boundary=b"})
    assert upload_chunked.status_code == 413, upload_chunked.text


def test_metrics_count_routes_by_template_and_health_needs_no_key(http: TestClient,
                                                                  gateway: Gateway) -> None:
    ops = TestClient(build_ops_app(gateway))
    assert ops.get("/healthz").status_code == 200
    ready = ops.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["producer"] is False
    http.get("/v1/voices/abc")
    text = ops.get("/metrics").text
    assert 'vf_gateway_requests_total{route="/v1/voices/{id}",status="401"} 1.0' in text
    assert route_label("/v1/jobs/j-1") == "/v1/jobs/{id}" and route_label("/x/y") == "other"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_the_api_port_does_not_serve_the_ops_paths(http: TestClient, path: str) -> None:
    answer = http.get(path)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_connections_go_to_the_app_of_the_port_they_arrived_on(gateway: Gateway) -> None:
    api, ops = build_app(gateway), build_ops_app(gateway)
    # TestClient's connections arrive on port 80 of "testserver".
    on_ops = TestClient(PortRouter(api, ops, ops_port=80))
    assert on_ops.get("/healthz").status_code == 200
    assert on_ops.get("/v1/voices").status_code == 404  # the ops port has no API
    on_api = TestClient(PortRouter(api, ops, ops_port=9110))
    assert on_api.get("/healthz").status_code == 404
    assert on_api.get("/v1/voices").status_code == 401


def test_no_key_reaches_a_log_line(http: TestClient, gateway: Gateway,
                                   caplog: pytest.LogCaptureFixture) -> None:
    key = key_for(gateway)
    with caplog.at_level(logging.DEBUG):
        http.post("/v1/audio/speech", json={"model": "m", "input": "hi", "voice": "v"},
                  headers={"Authorization": f"Bearer {key}"})
        http.post("/v1/audio/speech", json={}, headers={"Authorization": "Bearer vf-guess"})
    assert key not in caplog.text and "vf-guess" not in caplog.text


def test_a_store_outage_is_503_with_retry_after(http: TestClient, gateway: Gateway) -> None:
    from topics.errors import ErrorCode, VoiceFactoryError

    def down(key: str) -> None:
        raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"stat {key}: connection refused")

    gateway.store.stat = down  # type: ignore[method-assign]
    gateway.store.get = down  # type: ignore[method-assign]
    auth = {"Authorization": f"Bearer {key_for(gateway)}"}
    speech = http.post("/v1/audio/speech", headers=auth,
                       json={"model": "tts-1", "input": "Hi.", "voice": "narrator-1"})
    assert speech.status_code == 503 and speech.headers["retry-after"] == "1"
    assert speech.json()["error"]["code"] == "storage_unavailable"
    assert http.get("/v1/voices/v1", headers=auth).status_code == 503
