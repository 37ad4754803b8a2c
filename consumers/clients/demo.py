"""`voicefactory demo`: the whole product on the local stack in one command.

dev up (by the CLI) -> make a reference clip with espeak-ng, and the speaker's consent
recording with the same espeak-ng voice -> register it as a voice with that consent -> run
a worker in this process (`consumers.wiring.build_worker`, metrics port off) -> request
three lines (Mandarin, Cantonese, English) -> wait for the results -> download each clip
into the out folder (default <state dir>/demo) -> print where everything is -> stop the
worker.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from consumers import logs
from consumers.clients.produce import new_request_id, publish_voice, request_and_wait
from consumers.settings import Settings
from consumers.wiring import build_worker
from pipeline.audio import decode, speech_seconds
from pipeline.consent import register_with_consent, statement_for
from topics.events import SynthesisRequest

DEMO_VOICE = "demo-narrator"
REFERENCE_TEXT = ("Welcome to the voice factory. This short sentence is the reference "
                  "recording that the demo voice is built from.")
LINES = [
    ("zh", "欢迎来到语音工厂，今天我们为短视频生成旁白。"),
    ("yue", "早晨，今日天氣好好，我哋一齊去飲茶。"),
    ("en", "Every line you produce to Kafka comes back as audio in the object store."),
]


DEMO_SPEAKER = "Demo Narrator"


def make_reference(path: Path, text: str = REFERENCE_TEXT) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), text],
                   check=True)
    return path.read_bytes()


def make_consent(path: Path, speaker: str = DEMO_SPEAKER) -> bytes:
    """The consent statement, said by the reference's own (espeak-ng) voice."""
    return make_reference(path, statement_for(speaker))


async def run_demo(settings: Settings, out_dir: Path, out: TextIO = sys.stdout) -> int:
    started = time.monotonic()
    logs.configure("text", "WARNING")
    # metrics_port -1: the demo's worker must not collide with a real worker's port.
    runtime = build_worker(settings.with_overrides(worker={"metrics_port": -1}))
    reference = make_reference(out_dir / "reference.wav")
    voice = register_with_consent(
        runtime.store, voice_id=DEMO_VOICE, reference=reference, prompt_text=REFERENCE_TEXT,
        language="en", recording=make_consent(out_dir / "consent.wav"), speaker=DEMO_SPEAKER,
        threshold=settings.gateway.consent_threshold)
    await publish_voice(settings, voice)
    assert voice.consent is not None
    print(f"voice {DEMO_VOICE}: registered ({voice.reference}) with consent "
          f"{voice.consent.id} (speaker similarity {voice.consent.similarity:.3f})", file=out)
    worker = runtime.worker
    worker_task = asyncio.create_task(worker.run())
    requests = [SynthesisRequest(request_id=new_request_id(), voice_id=DEMO_VOICE, text=text,
                                 language=lang, metadata={"demo_line": i})
                for i, (lang, text) in enumerate(LINES)]
    try:
        print(f"submitted {len(requests)} requests to {settings.kafka.topic_prefix}tts.requests; "
              "waiting for results ...", file=out)
        results = await request_and_wait(settings, requests, timeout_s=180)
    finally:
        worker.stop()
        await worker_task
    failures = 0
    print(f"\n{'lang':5} {'status':10} {'dur_s':>6} {'sim':>5}  object key -> local file",
          file=out)
    for request, (lang, _text) in zip(requests, LINES, strict=True):
        result = results[request.request_id]
        if result.status != "succeeded" or result.audio is None:
            failures += 1
            code = result.error.code if result.error else "?"
            print(f"{lang:5} {result.status:10} {'-':>6} {'-':>5}  {code}", file=out)
            continue
        data = runtime.store.get(result.audio.key) or b""
        local = out_dir / f"{lang}-{request.request_id}.wav"
        local.write_bytes(data)
        audible = speech_seconds(decode(data))
        quality = result.quality
        sim = quality.speaker_similarity if quality else None
        warn = f"; warnings: {', '.join(quality.warnings)}" if quality and quality.warnings else ""
        print(f"{lang:5} {result.status:10} {result.audio.duration_s:6.2f} "
              f"{'-' if sim is None else f'{sim:.2f}':>5}  "
              f"s3://{result.audio.bucket}/{result.audio.key} -> {local} "
              f"({audible:.1f} s audible{warn})", file=out)
    print("sim: speaker similarity of output and reference (GE2E cosine; espeak-ng matches "
          "pitch and pace, not timbre)", file=out)
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s with the espeak engine "
          f"(CosyVoice weights are not bundled); audio in {out_dir}", file=out)
    return 1 if failures else 0
