"""The console's routes without Kafka: its files and their CSP, the voice check's dry run,
stored bytes same-origin (references, subtitles, clips) and the fleet summary.

The store is a dict (the routes' logic is what is tested here; tests/integration/console
runs them against the real S3 server and a real browser). The app's lifespan, which starts
the Kafka clients, is not entered.
"""

from __future__ import annotations

import io
import re
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from starlette.testclient import TestClient

from consumers.fleet.router import FleetRouter
from consumers.fleet.summary import CodeCount
from consumers.fleet.view import FleetView
from consumers.gateway import console
from consumers.gateway.app import build_app, route_label
from consumers.gateway.console_api import RecentErrors
from consumers.gateway.keys import SCOPES, KeyRing, add_key
from consumers.gateway.runtime import Gateway
from consumers.settings import GatewaySettings, Settings
from pipeline import keys
from pipeline.storage import ObjectStore
from pipeline.voices import register_voice
from tests.unit.consumers.gateway.memorystore import MemoryStore
from tests.unit.pipeline.conftest import espeak_wav
from topics.events import AudioRef, ClipSpan, JobClip, JobCompleted, encode
from topics.fleet import LaneLoad, ProfileCounts, WorkerStatus


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway(tmp_path: Path, store: MemoryStore) -> Gateway:
    path = tmp_path / "keys"
    settings = Settings(gateway=GatewaySettings(keys_file=str(path)))
    return Gateway(settings, store=cast(ObjectStore, store), keyring=KeyRing(path))


@pytest.fixture
def http(gateway: Gateway) -> Iterator[TestClient]:
    yield TestClient(build_app(gateway), raise_server_exceptions=False)


@pytest.fixture
def auth(gateway: Gateway) -> dict[str, str]:
    # The default tenant: the objects these tests seed are in the layout it owns (keys.py).
    key = add_key(gateway.keys.path, "default", rate=100, streams=2, scopes=SCOPES)
    gateway.keys.refresh(force=True)
    return {"Authorization": f"Bearer {key}"}


# -- the files -------------------------------------------------------------------------------

def test_the_console_is_served_without_a_key_under_a_strict_csp(http: TestClient) -> None:
    assert http.get("/console", follow_redirects=False).status_code == 308
    index = http.get("/console/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    csp = index.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self';" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "media-src 'self' blob:" in csp and "frame-ancestors 'none'" in csp
    script = http.get("/console/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["content-security-policy"] == csp
    assert script.headers["x-content-type-options"] == "nosniff"
    for bad in ("/console/nope.js", "/console/console.py", "/console/..%2Fconsole.py",
                "/console/%2E%2E%2Fapp.py"):
        assert http.get(bad).status_code == 404, bad


def test_the_shipped_page_has_no_inline_script_style_or_remote_asset() -> None:
    files = console.shipped()
    assert set(files) == {"index.html", "app.js", "app.css"}
    html = files["index.html"].read_text(encoding="utf-8")
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", html))
    assert not re.search(r"\son\w+=|style=|<style", html)
    code = files["app.js"].read_text(encoding="utf-8")
    text = html + code + files["app.css"].read_text(encoding="utf-8")
    assert not re.search(r"https?://", text)  # every asset and call is same-origin
    # The key: sessionStorage and the Authorization header only.
    assert "localStorage." not in code and "console.log" not in code
    assert "sessionStorage" in code and "`Bearer ${key()}`" in code
    assert ".innerHTML" not in code and ".style." not in code


def test_new_routes_have_their_own_metric_labels() -> None:
    assert route_label("/v1/voices/v-1/reference") == "/v1/voices/{id}/reference"
    assert route_label("/v1/jobs/j/subtitles") == "/v1/jobs/{id}/subtitles"
    assert route_label("/v1/jobs/j/clips/3") == "/v1/jobs/{id}/clips/{index}"
    assert route_label("/v1/fleet") == "/v1/fleet"
    assert route_label("/console/app.js") == "/console"


# -- the voice check's dry run ---------------------------------------------------------------

def test_a_dry_run_answers_the_verdict_table_and_stores_nothing(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    good = espeak_wav()
    answer = http.post("/v1/voices?dry_run=1", headers=auth, files={"reference": ("r.wav", good)},
                       data={"voice_id": "narrator-1", "transcript": "The quick brown fox."})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True and body["id"] == "narrator-1" and body["object"] == "voice.check"
    assert {c["rule"] for c in body["checks"]} >= {"size", "decodable", "speech duration"}
    assert all(c["ok"] or c["advisory"] for c in body["checks"])
    assert store.objects == {}  # nothing stored (and no producer exists to produce with)

    short = espeak_wav("Hi.")  # well under the duration rule's minimum
    refused = http.post("/v1/voices?dry_run=1", headers=auth,
                        files={"reference": ("r.wav", short)})
    assert refused.status_code == 422
    failing = [c for c in refused.json()["checks"] if not c["ok"] and not c["advisory"]]
    assert [c["rule"] for c in failing] == ["speech duration"] and failing[0]["problem"]
    assert store.objects == {}


# -- stored bytes ----------------------------------------------------------------------------

def test_a_voice_reference_is_served_from_the_store(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    reference = espeak_wav()
    register_voice(cast(ObjectStore, store), voice_id="narrator-1", reference=reference,
                   prompt_text=None, language="en")
    answer = http.get("/v1/voices/narrator-1/reference", headers=auth)
    assert answer.status_code == 200 and answer.content == reference
    assert answer.headers["content-type"] == "audio/wav"
    assert http.get("/v1/voices/narrator-1/reference").status_code == 401
    assert http.get("/v1/voices/ghost/reference", headers=auth).status_code == 404
    assert http.get("/v1/voices/a..b/reference", headers=auth).status_code == 400


def _closed_job(store: MemoryStore, bucket: str) -> None:
    audio = AudioRef(bucket=bucket, key="audio/2026/12/04/ep1-0000.wav", url="s3://x",
                     format="wav", sample_rate=24000, duration_s=1.0, bytes=4, sha256="0")
    clips = [JobClip(index=0, request_id="ep1-0000", voice_id="v", text="One.",
                     status="succeeded", duration_s=1.0, audio=audio),
             JobClip(index=1, request_id="ep1-0001", voice_id="v", text="Two.", status="failed")]
    timeline = [ClipSpan(index=0, start_s=0.0, end_s=1.0)]
    event = JobCompleted(job_id="ep1", status="partial", total=2, clips=clips, timeline=timeline,
                         completed_at="2026-12-04T00:00:00+00:00", subtitles="s3://srt")
    store.put(keys.job_json_key("ep1"), encode(event), "application/json")
    store.put(keys.job_subtitles_key("ep1"), b"1\n00:00:00,000 --> 00:00:01,000\nOne.\n", "")
    store.put(audio.key, b"RIFF", "audio/wav")


def test_a_closed_jobs_subtitles_and_clips_are_served(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    _closed_job(store, store.bucket)
    srt = http.get("/v1/jobs/ep1/subtitles", headers=auth)
    assert srt.status_code == 200 and srt.text.startswith("1\n00:00:00,000")
    assert srt.headers["content-disposition"] == 'attachment; filename="ep1.srt"'
    clip = http.get("/v1/jobs/ep1/clips/0", headers=auth)
    assert clip.status_code == 200 and clip.content == b"RIFF"
    assert clip.headers["content-type"] == "audio/wav"
    assert http.get("/v1/jobs/ep1/clips/1", headers=auth).status_code == 404  # failed line
    assert http.get("/v1/jobs/ep1/clips/7", headers=auth).status_code == 404
    assert http.get("/v1/jobs/ep2/subtitles", headers=auth).json()["error"]["code"] == \
        "job_not_found"


def test_a_closed_jobs_clips_come_as_one_zip_and_its_timeline_as_json(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    _closed_job(store, store.bucket)
    answer = http.get("/v1/jobs/ep1/clips.zip", headers=auth)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    assert answer.headers["content-disposition"] == 'attachment; filename="ep1-clips.zip"'
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        assert archive.namelist() == ["0001-ep1-0000.wav"]  # the failed line has no clip
        assert archive.read("0001-ep1-0000.wav") == b"RIFF"
    line = http.get("/v1/jobs/ep1/timeline", headers=auth).json()
    assert line["timeline"] == [{"index": 0, "start_s": 0.0, "end_s": 1.0}]
    assert http.get("/v1/jobs/ep2/clips.zip", headers=auth).status_code == 404
    assert route_label("/v1/jobs/ep1/clips.zip") == "/v1/jobs/{id}/clips.zip"


def test_a_clip_in_another_bucket_is_not_served(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    _closed_job(store, "someone-elses")
    answer = http.get("/v1/jobs/ep1/clips/0", headers=auth)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "clip_not_found"
    archive = http.get("/v1/jobs/ep1/clips.zip", headers=auth).content
    assert zipfile.ZipFile(io.BytesIO(archive)).namelist() == []


def test_another_tenants_voice_and_job_answer_the_404_of_an_unknown_one(
        http: TestClient, auth: dict[str, str], store: MemoryStore, gateway: Gateway) -> None:
    """The default tenant's voice and closed job, read with rival's key: every route answers
    what an unknown ID gets, byte for byte, and the default's own key still reads them."""
    register_voice(cast(ObjectStore, store), voice_id="narrator-1", reference=espeak_wav(),
                   prompt_text=None, language="en")
    _closed_job(store, store.bucket)
    rival = {"Authorization": "Bearer " + add_key(gateway.keys.path, "rival", rate=100,
                                                  streams=2)}
    gateway.keys.refresh(force=True)
    for path in ("/v1/voices/{v}", "/v1/voices/{v}/reference", "/v1/jobs/{j}",
                 "/v1/jobs/{j}/subtitles", "/v1/jobs/{j}/clips/0", "/v1/jobs/{j}/clips.zip",
                 "/v1/jobs/{j}/timeline"):
        theirs = http.get(path.format(v="narrator-1", j="ep1"), headers=rival)
        unknown = http.get(path.format(v="narrator-1", j="ep1"), headers=rival)
        ghost = http.get(path.format(v="ghost", j="ghost"), headers=rival)
        assert theirs.status_code == 404, path
        assert theirs.content == unknown.content
        assert theirs.json()["error"]["code"] == ghost.json()["error"]["code"], path
        assert http.get(path.format(v="narrator-1", j="ep1"), headers=auth).status_code == 200
    assert http.get("/v1/voices", headers=rival).json()["data"] == []
    # The owner's job answer: links freshly presigned for the gateway's short lifetime.
    clip = http.get("/v1/jobs/ep1", headers=auth).json()["clips"][0]
    assert clip["audio"]["url"] == (f"memory://voicefactory/{clip['audio']['key']}"
                                    f"?expires={gateway.settings.gateway.presign_seconds}")
    assert gateway.settings.gateway.presign_seconds == 900
    gone = http.delete("/v1/voices/narrator-1", headers=rival)
    assert gone.status_code == 404 and gone.content == http.delete(
        "/v1/voices/narrator-1", headers=rival).content
    assert store.stat(keys.voice_json_key("narrator-1")) is not None  # nothing deleted


# -- the fleet summary -----------------------------------------------------------------------

def test_the_fleet_summary_without_a_view(http: TestClient, auth: dict[str, str],
                                          gateway: Gateway) -> None:
    http.get("/v1/voices/a..b/reference", headers=auth)  # a 400 to count
    gateway.lag.by_partition, gateway.lag.lag = {"s0": 1, "1": 0, "0": 2}, 3
    summary = http.get("/v1/fleet", headers=auth).json()
    assert summary["routing"] == "voice_id" and summary["workers"] == []
    assert summary["cache"] == {"hit": 0, "store": 0, "miss": 0, "hit_ratio": None}
    assert summary["errors_by_code"] == []
    lag = summary["interactive_lag"]
    assert lag == {"total": 3, "threshold": 200, "partitions": {"0": 2, "1": 0, "s0": 1}}
    assert list(lag["partitions"]) == ["0", "1", "s0"]  # the plain lane's first
    assert {"route": "/v1/voices/{id}/reference", "status": 400, "count": 1} in \
        summary["errors"]
    assert summary["routes"] == []  # nothing produced yet
    for lane, reason in (("interactive", "moved"), ("interactive", "home"),
                         ("batch", "copy"), ("interactive", "home")):
        gateway.metrics.on_route(lane, reason)
    assert http.get("/v1/fleet", headers=auth).json()["routes"] == [
        {"lane": "batch", "reason": "copy", "count": 1},
        {"lane": "interactive", "reason": "home", "count": 2},
        {"lane": "interactive", "reason": "moved", "count": 1}]
    assert http.get("/v1/fleet").status_code == 401


def test_the_fleet_summary_lists_each_workers_lanes(http: TestClient, auth: dict[str, str],
                                                    gateway: Gateway) -> None:
    router = FleetRouter(partitions=12)
    gateway.fleet = FleetView(gateway.settings.kafka, "tts.fleet", router)  # never started
    import time
    now_ms = int(time.time() * 1000)
    router.apply(WorkerStatus(worker="w-1", at_ms=now_ms, interval_ms=1000, hot=["a", "b"],
                              lanes={"interactive": LaneLoad(partitions=[0, 1], shards=[5],
                                                             queued=2, inflight=1, slots=2)}))
    router.apply(WorkerStatus(worker="w-2", at_ms=now_ms, interval_ms=1000, draining=True))
    router.apply(WorkerStatus(worker="w-3", at_ms=now_ms, interval_ms=1000,
                              profiles=ProfileCounts(hit=6, store=1, miss=1),
                              errors={"engine_error": 2, "text_too_long": 3}))
    router.apply(WorkerStatus(worker="w-4", at_ms=now_ms, interval_ms=1000,
                              profiles=ProfileCounts(hit=2),
                              errors={"engine_error": 2, "voice_not_found": 1}))
    summary = http.get("/v1/fleet", headers=auth).json()
    assert summary["routing"] == "fleet"
    one, two, three, four = summary["workers"]
    assert one["id"] == "w-1" and one["alive"] and one["hot_voices"] == 2
    assert one["lanes"]["interactive"] == {"partitions": [0, 1], "shards": [5], "backlog": 0,
                                           "queued": 2, "inflight": 1, "slots": 2, "load": 3}
    assert one["lanes"]["batch"]["load"] == 0
    assert two["id"] == "w-2" and two["draining"] and not two["alive"]
    assert one["cache"] is None and one["errors"] == {}  # a worker of before: no counts
    assert three["cache"] == {"hit": 6, "store": 1, "miss": 1, "hit_ratio": 0.75}
    assert four["cache"] == {"hit": 2, "store": 0, "miss": 0, "hit_ratio": 1.0}
    assert three["errors"] == {"engine_error": 2, "text_too_long": 3}
    assert summary["cache"] == {"hit": 8, "store": 1, "miss": 1, "hit_ratio": 0.8}
    assert summary["errors_by_code"] == [{"code": "engine_error", "count": 4},
                                         {"code": "text_too_long", "count": 3},
                                         {"code": "voice_not_found", "count": 1}]


def test_a_revised_jobs_files_are_its_latest_finished_versions(
        http: TestClient, auth: dict[str, str], store: MemoryStore) -> None:
    _closed_job(store, store.bucket)
    event = JobCompleted(job_id="ep1", status="succeeded", total=2, clips=[],
                         timeline=[ClipSpan(index=0, start_s=0.0, end_s=1.0),
                                   ClipSpan(index=1, start_s=1.2, end_s=2.0)],
                         completed_at="2026-12-04T00:01:00+00:00", subtitles="s3://srt",
                         version=2)
    store.put(keys.job_json_key("ep1", 2), encode(event), "application/json")
    store.put(keys.job_subtitles_key("ep1", 2), b"1\nv2\n", "")
    line = http.get("/v1/jobs/ep1/timeline", headers=auth).json()
    assert line["version"] == 2 and [s["index"] for s in line["timeline"]] == [0, 1]
    assert http.get("/v1/jobs/ep1/subtitles", headers=auth).text == "1\nv2\n"


def _with_errors(worker: str, at_ms: int = 0, **errors: int) -> WorkerStatus:
    return WorkerStatus(worker=worker, at_ms=at_ms, interval_ms=1000, errors=errors)


def test_recent_errors_are_the_counters_growth_inside_the_window() -> None:
    now = [0.0]
    recent = RecentErrors(window_s=300, clock=lambda: now[0])
    assert recent.observe([_with_errors("w-1", engine_error=5)]) == []  # the baseline
    now[0] = 100.0
    grown = recent.observe([_with_errors("w-1", engine_error=7, voice_not_found=1),
                            _with_errors("w-2", engine_error=4)])  # w-2 first seen: from now
    assert grown == [CodeCount(code="engine_error", count=2),
                     CodeCount(code="voice_not_found", count=1)]
    now[0] = 350.0  # the window starts at 50 s: the 0 s snapshot is still the baseline
    counters = [_with_errors("w-1", engine_error=9, voice_not_found=1),
                _with_errors("w-2", engine_error=1)]  # w-2 restarted: it counts from 0
    assert recent.observe(counters) == [CodeCount(code="engine_error", count=5),
                                        CodeCount(code="voice_not_found", count=1)]
    now[0] = 450.0  # the window starts at 150 s: the 100 s snapshot is the baseline now
    assert recent.observe(counters) == [CodeCount(code="engine_error", count=3)]


def test_the_fleet_summary_counts_recent_errors_between_looks(
        http: TestClient, auth: dict[str, str], gateway: Gateway) -> None:
    router = FleetRouter(partitions=12)
    gateway.fleet = FleetView(gateway.settings.kafka, "tts.fleet", router)  # never started
    now_ms = int(time.time() * 1000)
    router.apply(_with_errors("w-1", now_ms, engine_error=2))
    first = http.get("/v1/fleet", headers=auth).json()
    assert first["recent_errors_by_code"] == [] and first["recent_window_s"] == 300
    router.apply(_with_errors("w-1", now_ms + 500, engine_error=5))
    second = http.get("/v1/fleet", headers=auth).json()
    assert second["recent_errors_by_code"] == [{"code": "engine_error", "count": 3}]
    assert second["errors_by_code"] == [{"code": "engine_error", "count": 5}]
