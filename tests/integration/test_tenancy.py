"""Tenant isolation over the real stack (issue 21): Kafka, the S3 server, the gateway on
127.0.0.1 and a real worker (bench-free: the worker fixture's default engine).

Three tenants, `acme`, `rival` and `umbra`, each with its own key. acme registers a voice
and submits a job through the gateway; rival and umbra then try every operation on acme's
IDs: list, read, reference bytes, speak with, submit a job using, read the job, re-run and
cancel it, delete the voice. Each answers the 404 an unknown ID gets (same status, same
body) and changes nothing: acme still reads, speaks with and lists its voice afterwards. A
request produced straight to Kafka by rival naming acme's voice is answered
`voice_not_found` by the worker.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from minio import Minio

from consumers.clients.demo import REFERENCE_TEXT, make_consent, make_reference
from consumers.gateway.keys import KeyRing, add_key
from consumers.settings import GatewaySettings, Settings
from consumers.wiring import make_store
from deploy.local import stack
from pipeline import keys
from tests.integration.conftest import RunningWorker
from tests.integration.gateway_harness import RunningGateway
from tests.integration.workers import produce, wait_for_answers
from topics.events import SynthesisRequest

pytestmark = pytest.mark.integration

TENANTS = ("acme", "rival", "umbra")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A bucket of this test's own: the session's is shared with other tests whose keys name
    `acme` too, and this test asserts what each tenant has, exactly."""
    bucket = f"vf-tenancy-{uuid.uuid4().hex[:8]}"
    Minio(f"127.0.0.1:{stack.S3_PORT}", access_key=stack.S3_ACCESS_KEY,
          secret_key=stack.S3_SECRET_KEY, secure=False).make_bucket(bucket)
    return settings.with_overrides(store={"bucket": bucket})


@pytest.fixture
async def gateway(settings: Settings, tmp_path: Path
                  ) -> AsyncIterator[tuple[str, dict[str, dict[str, str]]]]:
    prefix = settings.kafka.topic_prefix
    gw_settings = Settings(kafka=settings.kafka, store=settings.store, worker=settings.worker,
                           gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                                   group_id=f"vf-gateway-{prefix}",
                                                   timeout_s=60.0))
    path = gw_settings.gateway.keys_path()
    auth = {t: {"Authorization": "Bearer " + add_key(path, t, rate=100, streams=4)}
            for t in TENANTS}
    async with RunningWorker(settings), RunningGateway(gw_settings, KeyRing(path)) as gw:
        yield gw.url, auth


async def test_another_tenants_ids_answer_404_and_change_nothing(
        settings: Settings, tmp_path: Path,
        gateway: tuple[str, dict[str, dict[str, str]]]) -> None:
    url, auth = gateway
    acme = auth["acme"]
    reference = make_reference(tmp_path / "reference.wav")
    consent = make_consent(tmp_path / "consent.wav")  # the same espeak-ng speaker
    job_id = f"ep-{uuid.uuid4().hex[:8]}"
    script = {"job_id": job_id, "lines": [{"voice": "acme-narrator", "text": "One line."}]}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        made = await http.post("/v1/voices", headers=acme,
                               files={"reference": ("r.wav", reference),
                                      "consent_recording": ("c.wav", consent)},
                               data={"voice_id": "acme-narrator", "transcript": REFERENCE_TEXT})
        assert made.status_code == 201, made.text
        queued = await http.post("/v1/jobs", headers=acme, json=script)
        assert queued.status_code == 202, queued.text
        store = make_store(settings.store)
        before = sorted(store.list_prefix("tenants/acme/"))
        assert keys.voice_json_key("acme-narrator", tenant="acme") in before

        for other in ("rival", "umbra"):
            them = auth[other]
            listed = await http.get("/v1/voices", headers=them)
            assert listed.status_code == 200 and listed.json()["data"] == []
            for method, theirs, ghost, body in (
                    ("GET", "/v1/voices/acme-narrator", "/v1/voices/ghost", None),
                    ("GET", "/v1/voices/acme-narrator/reference", "/v1/voices/ghost/reference",
                     None),
                    ("GET", f"/v1/jobs/{job_id}", "/v1/jobs/ghost", None),
                    ("POST", f"/v1/jobs/{job_id}/rerun", "/v1/jobs/ghost/rerun",
                     {"failed": True}),
                    ("POST", f"/v1/jobs/{job_id}/cancel", "/v1/jobs/ghost/cancel", None),
                    ("GET", f"/v1/jobs/{job_id}/subtitles", "/v1/jobs/ghost/subtitles", None),
                    ("GET", f"/v1/jobs/{job_id}/clips/0", "/v1/jobs/ghost/clips/0", None),
                    ("DELETE", "/v1/voices/acme-narrator", "/v1/voices/ghost", None)):
                got = await http.request(method, theirs, headers=them, json=body)
                unknown = await http.request(method, ghost, headers=them, json=body)
                assert got.status_code == unknown.status_code == 404, (other, theirs, got.text)
                assert got.json()["error"]["code"] == unknown.json()["error"]["code"]
                assert got.text == unknown.text.replace("ghost", theirs.split("/")[3]), theirs
            spoken = await http.post("/v1/audio/speech", headers=them, json={
                "model": "tts-1", "voice": "acme-narrator", "input": "Not mine to use."})
            assert spoken.status_code == 404, spoken.text
            assert spoken.json()["error"]["code"] == "voice_not_found"
            using = await http.post("/v1/jobs", headers=them, json=script)
            assert using.status_code == 400 and using.json()["error"]["code"] == \
                "voice_not_found", using.text

        # Nothing changed: acme's objects are all there, and acme still uses its voice.
        assert set(store.list_prefix("tenants/acme/")) >= set(before)  # nothing of acme's gone
        assert store.list_prefix("tenants/rival/") == store.list_prefix("tenants/umbra/") == []
        mine = await http.get("/v1/voices/acme-narrator", headers=acme)
        assert mine.status_code == 200 and mine.json()["id"] == "acme-narrator"
        spoken = await http.post("/v1/audio/speech", headers=acme, json={
            "model": "tts-1", "voice": "acme-narrator", "input": "Still mine.",
            "response_format": "wav"})
        assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF", spoken.text
        listed = (await http.get("/v1/voices", headers=acme)).json()["data"]
        assert [v["id"] for v in listed] == ["acme-narrator"]

    # A producer bug cannot cross tenants either: the worker looks the voice up in rival's.
    rid = f"rival-{uuid.uuid4().hex[:8]}"
    await produce(settings, [SynthesisRequest(request_id=rid, voice_id="acme-narrator",
                                              text="Straight to Kafka.", tenant="rival")])
    (answer,) = [r for r in await wait_for_answers(settings, {rid}, 120) if r.request_id == rid]
    assert answer.status == "rejected" and answer.tenant == "rival"
    assert answer.error is not None and answer.error.code == "voice_not_found"
    assert store.list_prefix("tenants/rival/") == []  # no audio written for rival
