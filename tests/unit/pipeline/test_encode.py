"""Output encoding checked by independent decoders (ffprobe, sox) and loudness targets."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import Audio, decode
from pipeline.encode import encode, resample, target_rate
from pipeline.loudness import PEAK_CEILING, loudness_lufs, normalize_loudness
from tests.unit.pipeline.conftest import espeak_wav

needs_ffprobe = pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffprobe missing")


def speech(rate: int) -> Audio:
    return resample(decode(espeak_wav()), rate)


@needs_ffprobe
@pytest.mark.parametrize(("fmt", "rate", "codec"), [
    ("wav", 16000, "pcm_s16le"), ("wav", 44100, "pcm_s16le"), ("flac", 22050, "flac"),
    ("flac", 48000, "flac"), ("mp3", 24000, "mp3"), ("mp3", 44100, "mp3"),
    ("opus", 24000, "opus"), ("opus", 48000, "opus"),
])
def test_ffprobe_reads_each_format_at_the_requested_rate(fmt: str, rate: int, codec: str,
                                                          tmp_path: Path) -> None:
    source = speech(22050)
    out = tmp_path / f"clip.{fmt}"
    out.write_bytes(encode(resample(source, target_rate(fmt, rate, 22050)), fmt))
    probe = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", str(out)],
        capture_output=True, check=True, text=True).stdout)
    [stream] = probe["streams"]
    assert stream["codec_name"] == codec
    # Opus always decodes at 48 kHz in ffmpeg; the rate it was encoded at is in the header.
    assert int(stream["sample_rate"]) == (48000 if fmt == "opus" else rate)
    assert float(probe["format"]["duration"]) == pytest.approx(source.duration_s, abs=0.1)


@pytest.mark.skipif(shutil.which("soxi") is None, reason="sox missing")
@pytest.mark.parametrize(("fmt", "rate"), [("wav", 16000), ("flac", 44100), ("opus", 24000)])
def test_sox_agrees_on_rate_and_length(fmt: str, rate: int, tmp_path: Path) -> None:
    out = tmp_path / f"clip.{'ogg' if fmt == 'opus' else fmt}"
    audio = resample(speech(22050), rate)
    out.write_bytes(encode(audio, fmt))
    if fmt == "opus":  # Debian's sox reads Vorbis but not Opus: the container check only
        assert out.read_bytes()[:4] == b"OggS" and b"OpusHead" in out.read_bytes()[:100]
        return
    reported = subprocess.run(["soxi", "-r", str(out)], capture_output=True, text=True,
                              check=True).stdout
    assert int(reported) == rate
    seconds = float(subprocess.run(["soxi", "-D", str(out)], capture_output=True, text=True,
                                   check=True).stdout)
    assert seconds == pytest.approx(audio.duration_s, abs=0.01)


@pytest.mark.parametrize("target", [-23.0, -18.0, -16.0])
def test_loudness_is_normalised_to_the_target(target: float) -> None:
    quiet = speech(24000)
    quiet = Audio(quiet.samples * 0.05, quiet.sample_rate)
    out, before, after = normalize_loudness(quiet, target)
    assert before < target - 10
    assert loudness_lufs(out) == pytest.approx(target, abs=0.5)
    assert after == pytest.approx(target, abs=0.5)
    assert float(np.max(np.abs(out.samples))) <= PEAK_CEILING + 1e-6


def test_a_target_beyond_the_limiter_is_reported_as_reached_not_faked() -> None:
    out, _, after = normalize_loudness(speech(24000), -12.0)
    assert after == pytest.approx(loudness_lufs(out), abs=0.01)
    assert -14.0 < after < -12.0 + 0.1
    assert float(np.max(np.abs(out.samples))) <= PEAK_CEILING + 1e-6


def test_a_peaky_clip_is_limited_not_clipped() -> None:
    clicks = np.zeros(48000, np.float32)
    clicks[::4800] = 0.5  # ten impulses: loud peaks, almost no energy
    out, before, after = normalize_loudness(Audio(clicks, 48000), -16.0)
    assert float(np.max(np.abs(out.samples))) == pytest.approx(PEAK_CEILING, rel=1e-4)
    assert after < -16.0 - 6  # the quality check reports this as "too quiet"
    assert before < after


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 44100, 48000])
def test_loudness_agrees_with_torchaudio_and_the_standard(rate: int) -> None:
    import torch
    import torchaudio.functional as taf

    clip = speech(rate)
    reference = float(taf.loudness(torch.from_numpy(clip.samples).unsqueeze(0), rate))
    assert loudness_lufs(clip) == pytest.approx(reference, abs=0.15)
    t = np.arange(rate) / rate  # BS.1770: a full-scale 997-Hz sine reads -3.01 LUFS
    sine = Audio(np.sin(2 * np.pi * 997 * t).astype(np.float32), rate)
    assert loudness_lufs(sine) == pytest.approx(-3.01, abs=0.05)


def test_silence_is_left_alone() -> None:
    silent = Audio(np.zeros(16000, np.float32), 16000)
    out, before, after = normalize_loudness(silent, -16.0)
    assert before == after == float("-inf")
    assert not np.any(out.samples)


@pytest.mark.parametrize(("rate", "n"), [(24000, 24000), (44100, 44101), (8000, 1), (16000, 0)])
def test_wav_is_byte_for_byte_what_libsndfile_writes(rate: int, n: int) -> None:
    import io

    import soundfile as sf

    samples = np.random.default_rng(n).uniform(-1.2, 1.2, n).astype(np.float32)
    samples[: min(n, 4)] = [1.0, -1.0, 0.5, -1 / 65536][: min(n, 4)]
    buf = io.BytesIO()
    sf.write(buf, np.clip(samples, -1.0, 1.0), rate, format="WAV", subtype="PCM_16")
    assert encode(Audio(samples, rate), "wav") == buf.getvalue()
    assert decode(encode(Audio(samples, rate), "wav")).sample_rate == rate
