"""Reference clip validation (DESIGN.md "Voice profiles"), run by the CLI before upload and
again by the worker.

bytes -> size rule -> decode (libsndfile: wav/flac/ogg/mp3; FFmpeg for m4a/aac where it is
installed) -> measurements (speech after trimming silence, RMS level, peak, clipping ratio,
sample rate, an SNR estimate) -> one `Check` row per rule, each naming the measured value
and the limit, so `voices check` prints a verdict table and a failure message names the rule.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

from pipeline.audio import Audio, AudioDecodeError, decode, speech_seconds

MAX_BYTES = 20 * 1024 * 1024
MIN_SPEECH_S = 3.0
MAX_SPEECH_S = 30.0
MIN_RATE = 16000
MAX_CLIPPED = 0.01
SILENT_PEAK_DBFS = -50.0
MIN_SNR_DB = 15.0  # advisory: below it the embedding captures the noise as well as the voice
_FFMPEG_TIMEOUT_S = 60


@dataclass(frozen=True)
class Check:
    rule: str
    ok: bool
    measured: str
    limit: str
    problem: str = ""  # the failure message, empty when ok
    advisory: bool = False  # reported, never a rejection (the SNR estimate is blind)


@dataclass(frozen=True)
class ReferenceReport:
    ok: bool
    problems: list[str]
    audio: Audio | None
    speech_s: float = 0.0
    peak_dbfs: float = float("-inf")
    clipped_ratio: float = 0.0
    rms_dbfs: float = float("-inf")
    snr_db: float | None = None
    checks: list[Check] = field(default_factory=list)


def decode_any(data: bytes) -> Audio:
    """libsndfile first; MP4 containers (m4a/aac) through the ffmpeg binary if present."""
    try:
        return decode(data)
    except AudioDecodeError:
        if data[4:8] != b"ftyp" and not data.startswith(b"\xff\xf1"):
            raise
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioDecodeError("m4a/aac needs FFmpeg, which is not installed "
                               "(`apt-get install ffmpeg`)")
    done = subprocess.run([ffmpeg, "-v", "error", "-i", "pipe:0", "-f", "wav", "-acodec",
                           "pcm_s16le", "pipe:1"], input=data, capture_output=True,
                          timeout=_FFMPEG_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise AudioDecodeError("not decodable audio (ffmpeg): "
                               + done.stderr.decode(errors="replace").strip()[:200])
    return decode(done.stdout)


def snr_estimate(audio: Audio, frame_s: float = 0.02) -> float | None:
    """Loud-frame energy over quiet-frame energy, in dB (10th vs 90th percentile of frames).

    A blind estimate: speech has pauses, and the quietest frames are the noise floor. None
    when the clip is too short to have both; capped at 60 dB for digital silence in pauses.
    """
    frame = max(1, int(audio.sample_rate * frame_s))
    count = len(audio.samples) // frame
    if count < 10:
        return None
    frames = audio.samples[: count * frame].reshape(count, frame).astype(np.float64)
    power = np.mean(frames**2, axis=1)
    noise, signal = np.percentile(power, [10, 90])
    if signal <= 0:
        return None
    return round(float(min(60.0, 10 * np.log10(signal / max(noise, signal * 1e-6)))), 1)


def _dbfs(value: float) -> float:
    return float(20 * np.log10(value)) if value > 0 else float("-inf")


def check_reference(data: bytes) -> ReferenceReport:
    size_ok = len(data) <= MAX_BYTES
    size = Check("size", size_ok, f"{len(data) / 2**20:.2f} MiB", f"<= {MAX_BYTES / 2**20:.0f} MiB",
                 "" if size_ok else f"reference too large: {len(data) / 2**20:.1f} MiB, "
                                    f"limit {MAX_BYTES / 2**20:.0f} MiB")
    if not size_ok:
        return ReferenceReport(False, [size.problem], None, checks=[size])
    try:
        audio = decode_any(data)
    except AudioDecodeError as exc:
        bad = Check("decodable", False, "no", "wav/flac/ogg/mp3/m4a",
                    f"reference undecodable: {exc}")
        return ReferenceReport(False, [bad.problem], None, checks=[size, bad])
    samples = audio.samples
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if samples.size else 0.0
    peak_dbfs, rms_dbfs = _dbfs(peak), _dbfs(rms)
    clipped = float(np.mean(np.abs(samples) >= 0.999)) if samples.size else 0.0
    speech = speech_seconds(audio)
    snr = snr_estimate(audio)
    silent = peak_dbfs < SILENT_PEAK_DBFS
    checks = [size, Check("decodable", True, "yes", "wav/flac/ogg/mp3/m4a"),
              _rate_check(audio.sample_rate),
              Check("not silent", not silent, f"peak {peak_dbfs:.1f} dBFS, rms {rms_dbfs:.1f} dBFS",
                    f"peak >= {SILENT_PEAK_DBFS:.0f} dBFS",
                    f"reference is silent: peak {peak_dbfs:.1f} dBFS, "
                    f"need >= {SILENT_PEAK_DBFS:.0f} dBFS" if silent else "")]
    if not silent:
        checks.append(_speech_check(speech))
    checks.append(Check("not clipped", clipped <= MAX_CLIPPED, f"{clipped:.2%} at full scale",
                        f"<= {MAX_CLIPPED:.0%}",
                        "" if clipped <= MAX_CLIPPED else
                        f"reference is clipped: {clipped:.1%} of samples at full scale, "
                        f"limit {MAX_CLIPPED:.0%}"))
    if snr is not None and not silent:
        checks.append(Check("snr (estimate)", snr >= MIN_SNR_DB, f"{snr:.1f} dB",
                            f">= {MIN_SNR_DB:.0f} dB advised",
                            "" if snr >= MIN_SNR_DB else
                            f"reference may be noisy: SNR about {snr:.1f} dB, "
                            f"{MIN_SNR_DB:.0f} dB advised", advisory=True))
    problems = [c.problem for c in checks if not c.ok and not c.advisory]
    return ReferenceReport(not problems, problems, audio, speech, peak_dbfs, clipped, rms_dbfs,
                           snr, checks)


def _rate_check(rate: int) -> Check:
    ok = rate >= MIN_RATE
    return Check("sample rate", ok, f"{rate} Hz", f">= {MIN_RATE} Hz",
                 "" if ok else f"reference sample rate too low: {rate} Hz, "
                               f"need >= {MIN_RATE} Hz")


def _speech_check(speech: float) -> Check:
    problem = ""
    if speech < MIN_SPEECH_S:
        problem = f"reference too short: {speech:.1f} s of speech, need >= {MIN_SPEECH_S:.1f} s"
    elif speech > MAX_SPEECH_S:
        problem = f"reference too long: {speech:.1f} s of speech, limit {MAX_SPEECH_S:.0f} s"
    return Check("speech duration", not problem, f"{speech:.2f} s after trimming silence",
                 f"{MIN_SPEECH_S:.0f}-{MAX_SPEECH_S:.0f} s", problem)
