"""Consent to clone through the official `openai` SDK (client.audio.voice_consents and
client.audio.voices), against `voicefactory gateway` as its own process on the real Kafka and
S3: the consent's speaker must be the sample's, a consent serves one voice of its own
tenant, and deleting the voice deletes its consent recording. The gateway's peak RSS after a
consent check is printed (run with -s) and bounded."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import openai
import pytest

from consumers.clients.demo import REFERENCE_TEXT, make_consent, make_reference
from consumers.gateway.keys import add_key
from consumers.settings import GatewaySettings, Settings
from consumers.wiring import make_store
from pipeline import keys
from pipeline.consent import DEFAULT_THRESHOLD, statement_for
from pipeline.storage import ObjectStore
from tests.integration.gateway_harness import cli_gateway
from tests.unit.pipeline.conftest import espeak_wav
from topics.events import VoiceRegistration

pytestmark = pytest.mark.integration
# The gateway with the GE2E encoder loaded: 120 MiB before, 1,108 MiB after (importing torch
# alone is ~700 MiB of it; docs/voices.md). The bound catches a second encoder or a leak.
MAX_PEAK_RSS_MIB = 1536


@pytest.fixture
def gw_settings(settings: Settings, tmp_path: Path) -> Settings:
    prefix = settings.kafka.topic_prefix
    return Settings(kafka=settings.kafka, store=settings.store, worker=settings.worker,
                    gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                            group_id=f"vf-gateway-{prefix}"))


@pytest.fixture
def api_keys(gw_settings: Settings) -> dict[str, str]:
    """A key of each tenant, written before the gateway starts (it is ready with keys)."""
    path = gw_settings.gateway.keys_path()
    return {t: add_key(path, t, rate=100, streams=4) for t in ("acme", "rival", "default")}


@pytest.fixture
async def gateway(gw_settings: Settings, api_keys: dict[str, str],
                  tmp_path: Path) -> AsyncIterator[tuple[int, str]]:
    async with cli_gateway(gw_settings, log=tmp_path / "gateway.log", ready_s=60) as (proc,
                                                                                     url):
        yield proc.pid, url


def sdk(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB (/proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = {m[1]: int(m[2]) / 1024 for m in re.finditer(r"(VmRSS|VmHWM):\s+(\d+) kB", status)}
    return found["VmRSS"], found["VmHWM"]


def voice_of(store: ObjectStore, voice_id: str, tenant: str) -> VoiceRegistration | None:
    raw = store.get(keys.voice_json_key(voice_id, tenant=tenant))
    return msgspec.json.decode(raw, type=VoiceRegistration) if raw is not None else None


async def test_consent_and_voice_through_the_sdk(gateway: tuple[int, str],
                                                 api_keys: dict[str, str],
                                                 gw_settings: Settings,
                                                 tmp_path: Path) -> None:
    pid, url = gateway
    acme, rival = sdk(url, api_keys["acme"]), sdk(url, api_keys["rival"])
    store = make_store(gw_settings.store)
    sample = make_reference(tmp_path / "sample.wav")
    recording = make_consent(tmp_path / "consent.wav", "Ada Lovelace")
    before = rss_mib(pid)

    consent = await acme.audio.voice_consents.create(
        name="Ada Lovelace", language="en-US",
        recording=("consent.wav", recording, "audio/wav"))
    assert consent.id.startswith("cons-") and consent.object == "audio.voice_consent"
    assert (consent.name, consent.language) == ("Ada Lovelace", "en-US")
    assert (await acme.audio.voice_consents.retrieve(consent.id)).name == "Ada Lovelace"
    # another tenant's consent is the same 404 as an unknown one, for reading and for use
    with pytest.raises(openai.NotFoundError) as unknown:
        await rival.audio.voice_consents.retrieve(consent.id)
    assert unknown.value.code == "consent_not_found"
    with pytest.raises(openai.NotFoundError):
        await rival.audio.voices.create(name="stolen", consent=consent.id,
                                        audio_sample=("s.wav", sample, "audio/wav"))
    assert voice_of(store, "stolen", "rival") is None

    voice = await acme.audio.voices.create(name="ada", consent=consent.id,
                                           audio_sample=("s.wav", sample, "audio/wav"))
    after = rss_mib(pid)
    print(f"\ngateway RSS before the first consent check {before[0]:.0f} MiB (peak "
          f"{before[1]:.0f}); after it {after[0]:.0f} MiB (peak {after[1]:.0f})")
    assert after[1] < MAX_PEAK_RSS_MIB
    assert (voice.id, voice.object) == ("ada", "audio.voice")
    event = voice_of(store, "ada", "acme")
    assert event is not None and event.consent is not None and event.tenant == "acme"
    assert (event.consent.id, event.consent.speaker) == (consent.id, "Ada Lovelace")
    assert event.consent.statement == statement_for("Ada Lovelace")
    assert event.consent.similarity >= DEFAULT_THRESHOLD
    kept = keys.voice_consent_key("ada", "wav", tenant="acme")
    assert event.consent.recording.endswith(kept) and store.get(kept) == recording
    # one consent, one voice: the pending record moved under the voice
    assert not store.list_prefix(keys.consent_prefix(consent.id, tenant="acme"))
    with pytest.raises(openai.NotFoundError):
        await acme.audio.voices.create(name="ada-2", consent=consent.id,
                                       audio_sample=("s.wav", sample, "audio/wav"))


async def test_another_speaker_or_a_bad_recording_is_refused(gateway: tuple[int, str],
                                                             api_keys: dict[str, str],
                                                             gw_settings: Settings,
                                                             tmp_path: Path) -> None:
    _, url = gateway
    acme = sdk(url, api_keys["acme"])
    store = make_store(gw_settings.store)
    sample = make_reference(tmp_path / "sample.wav")
    other = espeak_wav(statement_for("Mallory"), voice="en-us+f2")
    consent = await acme.audio.voice_consents.create(
        name="Mallory", language="en", recording=("c.wav", other, "audio/wav"))
    with pytest.raises(openai.UnprocessableEntityError) as mismatch:
        await acme.audio.voices.create(name="forged", consent=consent.id,
                                       audio_sample=("s.wav", sample, "audio/wav"))
    assert mismatch.value.code == "consent_mismatch"
    assert "similarity" in mismatch.value.message
    assert not store.list_prefix(keys.voice_prefix("forged", tenant="acme"))
    # the consent stays pending (it may suit another sample) until deleted
    await acme.delete(f"/audio/voice_consents/{consent.id}", cast_to=object)
    assert not store.list_prefix(keys.consent_prefix(consent.id, tenant="acme"))
    with pytest.raises(openai.UnprocessableEntityError) as short:
        await acme.audio.voice_consents.create(
            name="Ada", language="en", recording=("c.wav", espeak_wav("I agree."), "audio/wav"))
    assert short.value.code == "consent_invalid"
    assert "consent recording too short" in short.value.message


async def test_v1_voices_needs_a_consent_and_delete_takes_its_recording(
        gateway: tuple[int, str], api_keys: dict[str, str], gw_settings: Settings,
        tmp_path: Path) -> None:
    _, url = gateway
    # the default tenant: DELETE /v1/voices/{id} is tenant-aware only with issue 21's
    # isolation; the default tenant's layout is the one it reads today
    client = sdk(url, api_keys["default"])
    store = make_store(gw_settings.store)
    sample = make_reference(tmp_path / "sample.wav")
    form = {"voice_id": "consented", "transcript": REFERENCE_TEXT, "language": "en"}
    with pytest.raises(openai.BadRequestError) as missing:
        await client.post("/voices", cast_to=object, body=form,
                          files=[("reference", ("s.wav", sample, "audio/wav"))],
                          options={"headers": {"Content-Type": "multipart/form-data"}})
    assert missing.value.code == "consent_required"
    consent = await client.audio.voice_consents.create(
        name="Narrator", language="en",
        recording=("c.wav", make_consent(tmp_path / "c.wav", "Narrator"), "audio/wav"))
    created = await client.post(
        "/voices", cast_to=object, body={**form, "consent": consent.id},
        files=[("reference", ("s.wav", sample, "audio/wav"))],
        options={"headers": {"Content-Type": "multipart/form-data"}})
    assert isinstance(created, dict) and created["id"] == "consented"
    assert store.get(keys.voice_consent_key("consented", "wav")) is not None
    deleted = await client.delete("/voices/consented", cast_to=object)
    assert isinstance(deleted, dict) and deleted["objects"] == 4  # + consent.wav, .json
    assert not store.list_prefix(keys.voice_prefix("consented"))
