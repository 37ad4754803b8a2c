"""Voices on the real stack: profile tiers across a worker restart, ad-hoc references,
removal with a tombstone, quality signals and every output format at its requested rate."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from consumers.clients.demo import REFERENCE_TEXT, make_reference
from consumers.clients.produce import publish_voice_tombstone, request_and_wait
from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline import keys
from pipeline.voices import register_voice, remove_voice
from tests.integration.conftest import RunningWorker
from tests.integration.test_worker import _read_all
from topics.events import SynthesisRequest
from topics.specs import topic_names

pytestmark = pytest.mark.integration


def _profile_lookups(worker: RunningWorker) -> dict[str, float]:
    registry = worker.runtime.metrics.registry
    return {result: registry.get_sample_value("vf_profile_cache_total", {"result": result}) or 0.0
            for result in ("hit", "store", "miss")}


def _requests(voice: str, n: int, **fields: object) -> list[SynthesisRequest]:
    return [SynthesisRequest(request_id=f"pv-{uuid.uuid4().hex[:10]}", voice_id=voice,
                             text=f"Line number {i} of the profile test.", **fields)  # type: ignore[arg-type]
            for i in range(n)]


async def test_profile_is_computed_once_and_loaded_after_a_restart(
        settings: Settings, tmp_path: Path) -> None:
    # A voice of its own: the session's bucket may already hold a profile of the shared
    # fixture voice (same reference bytes, same sha) from an earlier test.
    voice = f"tiers-{uuid.uuid4().hex[:8]}"
    register_voice(make_store(settings.store), voice_id=voice,
                   reference=make_reference(tmp_path / "ref.wav"), prompt_text=REFERENCE_TEXT,
                   language="en")
    async with RunningWorker(settings) as first:
        results = await request_and_wait(settings, _requests(voice, 100), timeout_s=240)
        assert {r.status for r in results.values()} == {"succeeded"}
        lookups = _profile_lookups(first)
        assert first.runtime.processor._profiles.computed == 1
    assert lookups["miss"] == 1 and lookups["store"] == 0
    assert lookups["hit"] >= 1  # one lookup per batch; batches of one voice share it
    store = make_store(settings.store)
    profiles = [k for k in store.list_prefix(keys.voice_prefix(voice)) if "profile-" in k]
    assert len(profiles) == 1 and profiles[0].endswith("-espeak.safetensors")

    async with RunningWorker(settings) as second:  # a restart: empty RAM tier
        again = await request_and_wait(settings, _requests(voice, 5), timeout_s=60)
        assert {r.status for r in again.values()} == {"succeeded"}
        lookups = _profile_lookups(second)
        assert second.runtime.processor._profiles.computed == 0
    assert lookups["store"] == 1 and lookups["miss"] == 0


async def test_results_carry_quality_signals(settings: Settings, voice: str,
                                             worker: RunningWorker) -> None:
    [result] = (await request_and_wait(settings, _requests(voice, 1), timeout_s=60)).values()
    assert result.status == "succeeded" and result.quality is not None
    similarity = result.quality.speaker_similarity
    assert similarity is not None and 0.3 < similarity <= 1.0  # same espeak voice family
    assert result.quality.loudness_lufs is not None
    assert result.quality.warnings == []


async def test_ad_hoc_reference_and_unknown_voice(settings: Settings, tmp_path: Path,
                                                  worker: RunningWorker) -> None:
    store = make_store(settings.store)
    store.put("uploads/caller-42.wav", make_reference(tmp_path / "ref.wav"), "audio/wav")
    adhoc = SynthesisRequest(request_id=f"ah-{uuid.uuid4().hex[:8]}", voice_id="adhoc-caller-42",
                             text="Thanks for calling.",
                             reference=f"s3://{settings.store.bucket}/uploads/caller-42.wav")
    unknown = SynthesisRequest(request_id=f"uk-{uuid.uuid4().hex[:8]}", voice_id="nobody",
                               text="Hello?")
    results = await request_and_wait(settings, [adhoc, unknown], timeout_s=60)
    assert results[adhoc.request_id].status == "succeeded", results[adhoc.request_id].error
    missing = results[unknown.request_id]
    assert missing.status == "rejected" and missing.error is not None
    assert missing.error.code == "voice_not_found"


async def test_voice_removal_deletes_objects_and_produces_a_tombstone(
        settings: Settings, voice: str, worker: RunningWorker) -> None:
    await request_and_wait(settings, _requests(voice, 1), timeout_s=60)  # stores a profile
    store = make_store(settings.store)
    # reference, voice.json and one profile per engine that served the voice (the session's
    # bucket is shared: other tests may have used it with the bench engine)
    stored = store.list_prefix(keys.voice_prefix(voice))
    assert {k.rsplit("/", 1)[1].split("-")[0] for k in stored} >= {"reference.wav",
                                                                     "voice.json", "profile"}
    assert any(k.endswith("-espeak.safetensors") for k in stored)
    assert remove_voice(store, voice) == len(stored)
    await publish_voice_tombstone(settings, voice)
    assert store.list_prefix(keys.voice_prefix(voice)) == []
    records = await _read_all(settings, topic_names(settings.kafka.topic_prefix).voices)
    assert b"" in records  # the tombstone (a null value, read back as empty)


@pytest.mark.parametrize(("fmt", "rate"), [("wav", 16000), ("flac", 44100), ("mp3", 22050),
                                           ("opus", 24000)])
async def test_every_format_decodes_with_ffprobe_at_the_requested_rate(
        settings: Settings, voice: str, worker: RunningWorker, fmt: str, rate: int,
        tmp_path: Path) -> None:
    [request] = _requests(voice, 1, format=fmt, sample_rate=rate)
    result = (await request_and_wait(settings, [request], timeout_s=60))[request.request_id]
    assert result.status == "succeeded" and result.audio is not None
    assert result.audio.sample_rate == rate
    data = make_store(settings.store).get(result.audio.key)
    assert data is not None
    path = tmp_path / f"out.{fmt}"
    path.write_bytes(data)
    probe = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-of", "json", str(path)],
        capture_output=True, check=True, text=True).stdout)
    [stream] = probe["streams"]
    # ffmpeg decodes Opus at 48 kHz whatever the input rate; the header keeps the original.
    assert int(stream["sample_rate"]) == (48000 if fmt == "opus" else rate)
    if fmt == "opus":  # OpusHead: magic(8) version(1) channels(1) pre-skip(2) input rate(4)
        head = data.index(b"OpusHead")
        assert int.from_bytes(data[head + 12 : head + 16], "little") == rate
