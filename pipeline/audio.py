"""Audio I/O: decode bytes to mono float32, measure, encode WAV.

Decoding goes through libsndfile (wav, flac, ogg, mp3 with libsndfile >= 1.1).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import soundfile as sf

from topics.errors import ErrorCode, LocalError

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Audio:
    samples: Samples  # mono, float32 in [-1, 1]
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate if self.sample_rate else 0.0


class AudioDecodeError(LocalError, ValueError):
    """Bytes that are not audio this build can decode."""

    default_code = ErrorCode.REFERENCE_INVALID


def decode(data: bytes) -> Audio:
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise AudioDecodeError(f"not decodable audio: {exc}") from None
    mono = samples.mean(axis=1).astype(np.float32)
    return Audio(samples=mono, sample_rate=int(rate))


def encode_wav(audio: Audio) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio.samples, audio.sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def speech_seconds(audio: Audio, threshold_db: float = -40.0, frame_s: float = 0.02) -> float:
    """Seconds of frames louder than `threshold_db` relative to full scale."""
    frame = max(1, int(audio.sample_rate * frame_s))
    count = len(audio.samples) // frame
    if count == 0:
        return 0.0
    frames = audio.samples[: count * frame].reshape(count, frame)
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1))
    loud = rms > 10 ** (threshold_db / 20)
    return float(loud.sum() * frame / audio.sample_rate)
