"""/openapi.json: valid OpenAPI 3.1, every route described, and the gateway answers as it says.

No Kafka here (the app's lifespan is not entered; a memory store stands in for S3). The
second half pins what tests/integration/test_gateway_fuzz.py found, one test per bug.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import jsonschema_rs
import msgspec
import orjson
import pytest
import schemathesis
from aiokafka.errors import KafkaConnectionError
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Route
from starlette.testclient import TestClient

from consumers.clients.scripts import parse_script
from consumers.gateway import jobs, openapi
from consumers.gateway.app import build_app
from consumers.gateway.keys import SCOPES, KeyRing, add_key
from consumers.gateway.openapi_components import ApiError, Health, Readiness
from consumers.gateway.openapi_paths import JOB_EXAMPLE, NOT_API, SPEECH_EXAMPLE
from consumers.gateway.ops import build_ops_app
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import error_body
from consumers.gateway.speech import LANGUAGE_PATTERN, BadField, SpeechBody, parse_speech
from consumers.settings import GatewaySettings, Settings
from pipeline.keys import job_json_key, job_script_key
from pipeline.text.language import normalise_tag
from tests.unit.consumers.gateway.auditlog import recorded
from tests.unit.consumers.gateway.memorystore import MemoryStore
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import (
    AudioRef,
    JobClip,
    JobCompleted,
    SynthesisRequest,
    VoiceRegistration,
    encode,
)
from topics.validation import SAMPLE_RATES

VOICE_JSON = "voices/narrator-1/voice.json"


@pytest.fixture
def store() -> MemoryStore:
    memory = MemoryStore()
    memory.put(VOICE_JSON, encode(VoiceRegistration(
        voice_id="narrator-1", reference="s3://voicefactory/voices/narrator-1/reference.wav",
        sha256="0" * 64, created_at="2026-01-01T00:00:00Z", language="en")), "application/json")
    return memory


@pytest.fixture
def gateway(tmp_path: Path, store: MemoryStore) -> Gateway:
    keys = tmp_path / "keys"
    settings = Settings(gateway=GatewaySettings(keys_file=str(keys)))
    gateway = Gateway(settings, keyring=KeyRing(keys), store=store)  # type: ignore[arg-type]
    recorded(gateway)
    return gateway


@pytest.fixture
def auth(gateway: Gateway, tmp_path: Path) -> dict[str, str]:
    # The default tenant: the objects these tests seed are in the layout it owns (keys.py).
    key = add_key(tmp_path / "keys", "default", rate=1000, streams=2, scopes=SCOPES)
    gateway.keys.refresh(force=True)
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def http(gateway: Gateway) -> Iterator[TestClient]:
    yield TestClient(build_app(gateway), raise_server_exceptions=False)


# -- the document --------------------------------------------------------------------------------

def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = openapi.document()
    assert doc["openapi"] == "3.1.0"
    schemathesis.openapi.from_dict(doc).validate()  # the OpenAPI 3.1 meta-schema
    for ref in set(_refs(doc)):  # and every $ref points at something
        node: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        assert isinstance(node, dict), ref


def test_every_route_of_the_app_is_described_and_nothing_else(gateway: Gateway) -> None:
    app = build_app(gateway).app  # type: ignore[attr-defined]
    # {index:int} is {index} in OpenAPI (its schema says integer)
    served = {(method.lower(), re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path))
              for route in app.routes if isinstance(route, Route)
              for method in route.methods or () if method != "HEAD"}
    static = {(m, path) for m, path in served if path in NOT_API}
    assert {path for _, path in static} == NOT_API  # the exclusion names served routes
    served -= static
    described = {(method, path) for path, item in openapi.document()["paths"].items()
                 for method in item}
    assert served == described
    for path, item in openapi.document()["paths"].items():
        for spec in item.values():
            guarded = path.startswith("/v1/")
            assert spec["security"] == ([{"bearer": []}] if guarded else [])
            assert ("401" in spec["responses"]) is guarded and ("429" in spec["responses"]) \
                is guarded
            if "requestBody" in spec:
                assert "413" in spec["responses"]


def test_it_is_served_without_a_key(http: TestClient) -> None:
    reply = http.get("/openapi.json")
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    assert reply.json() == orjson.loads(orjson.dumps(openapi.document()))


def test_what_the_app_writes_outside_the_route_types_matches_the_document(
        http: TestClient, gateway: Gateway) -> None:
    strict = msgspec.json.Decoder(ApiError)
    body = strict.decode(error_body(422, "bad", "reference_invalid", "reference", checks=[]))
    assert body.error.type == "invalid_request_error" and body.checks == []
    assert strict.decode(error_body(503, "down", "kafka_error")).error.type == "server_error"
    ops = TestClient(build_ops_app(gateway))
    msgspec.json.decode(ops.get("/healthz").content, type=Health)
    ready = ops.get("/readyz")
    assert msgspec.json.decode(ready.content, type=Readiness).status == "unavailable"


def test_the_documents_examples_are_accepted_bodies() -> None:
    msgspec.convert(SPEECH_EXAMPLE, SpeechBody)
    order = parse_speech(SPEECH_EXAMPLE, tenant="acme")
    assert order.voice_id == "narrator-1" and order.requests
    msgspec.convert(JOB_EXAMPLE, jobs.JobScript)
    script = parse_script(JOB_EXAMPLE, source="example")
    assert len(script.requests) == 2
    body = openapi.document()["paths"]["/v1/audio/speech"]["post"]["requestBody"]
    assert body["content"]["application/json"]["example"] == SPEECH_EXAMPLE


def test_the_job_script_sample_rates_are_the_contracts() -> None:
    assert get_args(jobs.SampleRate) == SAMPLE_RATES


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        for value in node.values():
            yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


@pytest.mark.parametrize("sample", [
    "en", "en\n", " en", "zh_Hant-TW", "MANDARIN", "a", "a\x00b", "\x1c", "\x85", "\ufeff",
    "  ", "[R][EH1][D]", "[R] [D]", "narrator-1", "..", ".", "a/b", "x" * 70, "好", ""])
def test_each_pattern_means_the_same_to_python_and_to_ecma_262(sample: str) -> None:
    """msgspec checks with Python's `re`, JSON Schema readers with ECMA-262 regexes."""
    for pattern in set(_patterns(openapi.document())):
        ecma = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
        assert ecma.is_valid(sample) == bool(re.search(pattern, sample)), (pattern, sample)


@given(st.from_regex(LANGUAGE_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 35))
def test_a_tag_the_document_allows_is_one_the_engines_accept(tag: str) -> None:
    normalise_tag(tag)


# -- what the fuzzer found -----------------------------------------------------------------------

def test_starlettes_own_refusals_are_the_json_error_object(http: TestClient,
                                                          auth: dict[str, str]) -> None:
    missing = http.get("/v1/voices/a%2Fb", headers=auth)  # decoded to a path no route has
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    no_boundary = http.post("/v1/voices", content=b"x", headers={
        **auth, "Content-Type": "multipart/form-data"})
    assert no_boundary.status_code == 400
    assert no_boundary.headers["content-type"] == "application/json"


def test_a_405_names_every_method_of_the_path(http: TestClient, auth: dict[str, str]) -> None:
    reply = http.request("OPTIONS", "/v1/voices", headers=auth)
    assert reply.status_code == 405 and reply.json()["error"]["code"] == "method_not_allowed"
    assert set(reply.headers["allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


def _upload(http: TestClient, auth: dict[str, str], **parts: str) -> Any:
    return http.post("/v1/voices", headers=auth, data=parts,
                     files={"reference": ("r.wav", b"not audio")})


def test_a_voice_upload_takes_only_the_parts_it_documents(http: TestClient,
                                                         auth: dict[str, str]) -> None:
    typo = _upload(http, auth, transcipt="hello")
    assert typo.status_code == 400 and "transcipt" in typo.json()["error"]["message"]
    long = _upload(http, auth, transcript="x" * 2001)  # it travels in the tts.voices event
    assert long.status_code == 400 and long.json()["error"]["param"] == "transcript"
    tag = _upload(http, auth, language="not a tag")
    assert tag.status_code == 400 and tag.json()["error"]["param"] == "language"
    assert _upload(http, auth, transcript="hello", language="en").status_code == 422


def test_job_numbers_written_with_a_fraction_are_whole_numbers(
        http: TestClient, auth: dict[str, str], gateway: Gateway) -> None:
    produced: list[SynthesisRequest] = []

    async def produce(topic: str, requests: list[SynthesisRequest],
                      partition: int | None = None) -> None:
        produced.extend(requests)

    gateway.produce = produce  # type: ignore[method-assign]
    script = {"job_id": "j1", "voice": "narrator-1", "gap_ms": 250.0,
              "lines": [{"text": "Hello.", "sample_rate": 24000.0}]}
    reply = http.post("/v1/jobs", json=script, headers=auth)
    assert reply.status_code == 202, reply.text
    assert [r.sample_rate for r in produced] == [24000]


@pytest.mark.parametrize(("change", "param"), [
    ({"concat": "false"}, "concat"),  # bool("false") was True
    ({"language": "not a tag"}, "language"),  # the worker would reject it
    ({"lines": [{"text": "Hi.", "voice": None}]}, "voice"),
])
def test_a_script_the_document_refuses_is_refused(http: TestClient, auth: dict[str, str],
                                                  gateway: Gateway, change: dict[str, Any],
                                                  param: str) -> None:
    script = {"job_id": "j2", "voice": "narrator-1", "lines": [{"text": "Hi."}], **change}
    reply = http.post("/v1/jobs", json=script, headers=auth)
    assert reply.status_code == 400, reply.text
    assert param in reply.text


def test_a_note_is_one_annotation_and_nothing_beside_it() -> None:
    body = {"model": "m", "input": "I read it.", "voice": "v",
            "annotations": {"read": "[R][EH1][D] and more"}}
    with pytest.raises(BadField) as caught:
        parse_speech(body, tenant="acme")
    assert caught.value.field == "annotations"


def test_store_and_kafka_outages_are_503_not_404_or_500(
        http: TestClient, auth: dict[str, str], gateway: Gateway,
        store: MemoryStore) -> None:
    def down(prefix: str) -> list[str]:
        raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"list {prefix}: connection refused")

    async def refused(topic: str, requests: list[SynthesisRequest],
                      partition: int | None = None) -> None:
        raise KafkaConnectionError("no broker")

    gateway.produce = refused  # type: ignore[method-assign]
    job = http.post("/v1/jobs", headers=auth,
                    json={"job_id": "j3", "voice": "narrator-1", "lines": [{"text": "Hi."}]})
    assert job.status_code == 503 and job.json()["error"]["code"] == "kafka_error"
    store.list_prefix = down  # type: ignore[method-assign]
    deleted = http.delete("/v1/voices/narrator-1", headers=auth)
    assert deleted.status_code == 503 and deleted.headers["retry-after"] == "1"


# -- POST /v1/jobs/{id}/rerun: `job rerun` over HTTP ---------------------------------------------

def _close_version(store: MemoryStore, job_id: str, version: int, *, failed: set[int],
                   total: int = 3) -> None:
    """What the aggregator would store: version `version`'s job.json, `failed` lines without
    audio (the manifest is the one the gateway stored)."""
    clips = [JobClip(index=i, request_id=f"{job_id}-{i:04d}", voice_id="narrator-1",
                     text=f"Line {i}.", status="failed" if i in failed else "succeeded",
                     duration_s=0.0 if i in failed else 1.0,
                     audio=None if i in failed else AudioRef(
                         bucket="voicefactory", key=f"audio/{job_id}-{i}.wav", url="u",
                         format="wav", sample_rate=24000, duration_s=1.0, bytes=4,
                         sha256="0"))
             for i in range(total)]
    event = JobCompleted(job_id=job_id, status="partial" if failed else "succeeded",
                         total=total, clips=clips, timeline=[],
                         completed_at="2026-12-04T00:00:00Z", version=version)
    store.put(job_json_key(job_id, version), encode(event), "application/json")


def test_a_rerun_is_the_next_version_of_the_same_job(
        http: TestClient, auth: dict[str, str], store: MemoryStore,
        produced: list[SynthesisRequest]) -> None:
    script = {"job_id": "ep9", "voice": "narrator-1", "format": "flac",
              "lines": [{"text": f"Line {i}."} for i in range(3)]}
    assert http.post("/v1/jobs", json=script, headers=auth).status_code == 202
    rerun = http.post("/v1/jobs/ep9/rerun", json={"failed": True}, headers=auth)
    assert rerun.status_code == 409 and "still open" in rerun.json()["error"]["message"]
    _close_version(store, "ep9", 1, failed={1})
    produced.clear()
    rerun = http.post("/v1/jobs/ep9/rerun", json={"failed": True}, headers=auth)
    assert rerun.status_code == 202, rerun.text
    answer = msgspec.json.decode(rerun.content, type=jobs.JobQueued)
    assert (answer.version, answer.lines, answer.total) == (2, [1], 3)
    # the stored script's own options, the revision's request ID and version
    assert [(r.request_id, r.format, r.job and r.job.version) for r in produced] == \
        [("ep9-v2-0001", "flac", 2)]
    assert job_script_key("ep9", 2) in store.objects
    again = http.post("/v1/jobs/ep9/rerun", json={"lines": [0]}, headers=auth)
    assert again.status_code == 409  # version 2 is open
    _close_version(store, "ep9", 2, failed=set())
    produced.clear()
    by_index = http.post("/v1/jobs/ep9/rerun", json={"lines": [0, 2.0]}, headers=auth)
    assert by_index.status_code == 202 and by_index.json()["lines"] == [0, 2]
    assert [r.request_id for r in produced] == ["ep9-v3-0000", "ep9-v3-0002"]


def test_a_rerun_that_would_produce_nothing_or_names_nothing_is_refused(
        http: TestClient, auth: dict[str, str], store: MemoryStore,
        produced: list[SynthesisRequest]) -> None:
    unknown = http.post("/v1/jobs/ghost/rerun", json={"failed": True}, headers=auth)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "job_not_found"
    script = {"job_id": "ep10", "voice": "narrator-1",
              "lines": [{"text": f"Line {i}."} for i in range(3)]}
    assert http.post("/v1/jobs", json=script, headers=auth).status_code == 202
    _close_version(store, "ep10", 1, failed=set())
    produced.clear()
    nothing = http.post("/v1/jobs/ep10/rerun", json={"failed": True}, headers=auth)
    assert nothing.status_code == 409 and nothing.json()["error"]["code"] == "nothing_to_rerun"
    outside = http.post("/v1/jobs/ep10/rerun", json={"lines": [3]}, headers=auth)
    assert outside.status_code == 409 and "outside 0..2" in outside.text
    refusals: list[Any] = [{}, {"failed": False}, {"lines": []}, {"lines": [-1]},
                           {"failed": 1}, {"failed": True, "extra": 1}, [1]]
    for body in refusals:
        refused = http.post("/v1/jobs/ep10/rerun", json=body, headers=auth)
        assert refused.status_code == 400, (body, refused.text)
    assert http.post("/v1/jobs/ep10/rerun", content=b"{", headers=auth).status_code == 400
    assert http.post("/v1/jobs/a..b/rerun", json={"failed": True},
                     headers=auth).status_code == 400
    assert produced == [] and job_script_key("ep10", 2) not in store.objects


def test_the_documents_rerun_schema_refuses_what_the_route_refuses() -> None:
    schema = openapi.document()["components"]["schemas"]["JobRerun"]
    valid = jsonschema_rs.validator_for(schema)
    accepted: list[Any] = [{"failed": True}, {"lines": [3, 7]}, {"failed": False, "lines": [0]}]
    for body in accepted:
        assert valid.is_valid(body), body
    refused: list[Any] = [{}, {"failed": False}, {"lines": []}, {"lines": [-1]}, {"x": 1}]
    for body in refused:
        assert not valid.is_valid(body), body


def test_dry_run_takes_only_its_values(http: TestClient, auth: dict[str, str]) -> None:
    reply = http.post("/v1/voices?dry_run=yes", headers=auth,
                      files={"reference": ("r.wav", b"not audio")})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "dry_run"
    assert http.post("/v1/voices?dry_run=0", headers=auth,
                     files={"reference": ("r.wav", b"not audio")}).status_code == 422
