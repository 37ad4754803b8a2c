"""Reference validation: each rule named with its measured value and limit (DESIGN.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import Audio, encode_wav
from pipeline.reference import check_reference, snr_estimate
from tests.unit.pipeline.conftest import espeak_wav


def tone(seconds: float, rate: int = 22050, amplitude: float = 0.3) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    # A syllable-like envelope, so the clip has pauses like speech
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 3 * t)
    return Audio((amplitude * envelope * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate)


def failed_rules(data: bytes) -> dict[str, str]:
    report = check_reference(data)
    return {c.rule: c.problem for c in report.checks if not c.ok and not c.advisory}


def test_real_speech_passes_every_rule() -> None:
    report = check_reference(espeak_wav())
    assert report.ok, report.problems
    assert {c.rule for c in report.checks} >= {"size", "decodable", "sample rate", "not silent",
                                               "speech duration", "not clipped"}
    assert report.snr_db is not None and report.snr_db > 15


def test_one_second_clip_fails_as_too_short() -> None:
    assert failed_rules(encode_wav(tone(1.0))) == {
        "speech duration": "reference too short: 1.0 s of speech, need >= 3.0 s"}


def test_silence_fails_as_silent() -> None:
    silence = encode_wav(Audio(np.zeros(22050 * 4, np.float32), 22050))
    assert failed_rules(silence) == {
        "not silent": "reference is silent: peak -inf dBFS, need >= -50 dBFS"}


def test_clipped_clip_fails_as_clipped() -> None:
    problems = failed_rules(encode_wav(tone(4.0, amplitude=1.5)))
    assert list(problems) == ["not clipped"]
    assert problems["not clipped"].startswith("reference is clipped: ")
    assert "% of samples at full scale, limit 1%" in problems["not clipped"]


def test_8khz_fails_on_the_sample_rate_rule() -> None:
    assert failed_rules(encode_wav(tone(4.0, rate=8000))) == {
        "sample rate": "reference sample rate too low: 8000 Hz, need >= 16000 Hz"}


def test_random_bytes_are_undecodable() -> None:
    noise = np.random.default_rng(7).integers(0, 256, 50_000, dtype=np.uint8).tobytes()
    problems = failed_rules(noise)
    assert list(problems) == ["decodable"]
    assert problems["decodable"].startswith("reference undecodable: not decodable audio")


def test_oversized_file_is_refused_before_decoding() -> None:
    problems = failed_rules(b"RIFF" + bytes(21 * 2**20))
    assert problems == {"size": "reference too large: 21.0 MiB, limit 20 MiB"}


def test_noisy_clip_gets_an_advisory_not_a_rejection() -> None:
    clean = tone(5.0)
    noise = np.random.default_rng(1).normal(0, 0.08, clean.samples.size).astype(np.float32)
    noisy = Audio(clean.samples + noise, clean.sample_rate)
    report = check_reference(encode_wav(noisy))
    [snr] = [c for c in report.checks if c.rule == "snr (estimate)"]
    assert not snr.ok and snr.advisory and report.ok
    assert (snr_estimate(noisy) or 0) < (snr_estimate(clean) or 0)


@pytest.mark.parametrize("fmt", ["flac", "ogg", "mp3"])
def test_compressed_references_decode(fmt: str, tmp_path: Path) -> None:
    src = tmp_path / "ref.wav"
    src.write_bytes(espeak_wav())
    out = tmp_path / f"ref.{fmt}"
    import soundfile as sf

    data, rate = sf.read(src)
    sf.write(out, data, rate, format={"flac": "FLAC", "ogg": "OGG", "mp3": "MP3"}[fmt])
    assert check_reference(out.read_bytes()).ok


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing")
def test_m4a_decodes_through_ffmpeg(tmp_path: Path) -> None:
    src = tmp_path / "ref.wav"
    src.write_bytes(espeak_wav())
    out = tmp_path / "ref.m4a"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(src), "-c:a", "aac", str(out)],
                   check=True, env={**os.environ, "AV_LOG_FORCE_NOCOLOR": "1"})
    report = check_reference(out.read_bytes())
    assert report.ok, report.problems
    assert report.audio is not None and report.audio.sample_rate == 22050
