"""Speaker measurements of a clip: GE2E embedding, pitch and speaking rate.

Audio (any rate) -> mono float32 at 16 kHz (torchaudio's resampler)
  -> embedding: Resemblyzer's GE2E encoder (weights ship inside its wheel; nothing is
     downloaded) over voice-activity-trimmed audio -> 256 floats of unit norm
  -> pitch: frame-wise normalised autocorrelation in torch over voiced frames -> median F0
     and the 10th..90th percentile range in semitones
  -> rate: syllables of the transcript (Han characters, vowel groups of Latin words) per second
     of speech; None without a transcript, since guessing syllables from energy is too rough.
The encoder loads once per process (about 2 s) and is shared by threads: the worker measures
references in its engine threads and scores outputs for `quality.speaker_similarity`.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from types import ModuleType
from typing import Any

import numpy as np

from pipeline.audio import Audio, Samples, speech_seconds
from pipeline.engines.base import VoiceMeasures

RATE = 16000  # what the GE2E encoder was trained on
EMBEDDING_DIM = 256
_FRAME = 640  # 40 ms: two periods of an 50-Hz voice fit
_HOP = 160
_VOICED_NCCF = 0.6
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_VOWEL_GROUPS = re.compile(r"[aeiouy]+", re.IGNORECASE)
_LATIN_WORD = re.compile(r"[A-Za-z]+")


def to_16k(audio: Audio) -> Samples:
    if audio.sample_rate == RATE:
        return audio.samples
    import torch
    import torchaudio.functional as taf

    wave = torch.from_numpy(np.ascontiguousarray(audio.samples))
    out: Samples = taf.resample(wave, audio.sample_rate, RATE).numpy().astype(np.float32)
    return out


def _resemblyzer() -> ModuleType:
    # Resemblyzer 0.1.4 imports `scipy.ndimage.morphology`, deprecated since SciPy 1.8: a
    # known, harmless warning at import that would otherwise print in every worker.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import resemblyzer
    module: ModuleType = resemblyzer
    return module


class SpeakerEncoder:
    """Resemblyzer's VoiceEncoder behind a lock-guarded lazy load."""

    def __init__(self, device: str = "cpu") -> None:
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            import torch

            if self._device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
                # The worker runs up to max_inflight engine threads itself; torch's own pool
                # on top of them oversubscribes the cores (measured: 0.25 s -> 1-5 s a clip).
                torch.set_num_threads(1)
            model = _resemblyzer().VoiceEncoder(device=self._device, verbose=False)
            # The first LSTM call builds its kernels (seconds); pay that at start-up.
            model.embed_utterance(np.random.default_rng(0).normal(0, 0.1, RATE)
                                  .astype(np.float32))
            self._model = model

    def embed(self, audio: Audio) -> np.ndarray:
        """A unit-norm 256-d embedding; zeros when the clip holds no speech."""
        self.load()
        samples = to_16k(audio)
        if not np.any(samples):
            return np.zeros(EMBEDDING_DIM, np.float32)
        wav = _resemblyzer().preprocess_wav(samples, source_sr=RATE)
        if len(wav) < RATE // 4:  # under 250 ms of voice: nothing to embed
            return np.zeros(EMBEDDING_DIM, np.float32)
        vec = self._model.embed_utterance(wav)
        return np.asarray(vec, dtype=np.float32)

    def similarity(self, a: Audio, reference_embedding: np.ndarray) -> float | None:
        """Cosine similarity of `a`'s embedding with a reference's; None if either is empty."""
        emb = self.embed(a)
        return cosine(emb, reference_embedding)


def cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return None
    return round(float(np.dot(a, b) / (na * nb)), 4)


def pitch_track(audio: Audio, fmin: float = 60.0, fmax: float = 500.0) -> np.ndarray:
    """F0 in Hz of each voiced 40-ms frame (10-ms hop), by normalised autocorrelation."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(to_16k(audio))).to(torch.float64)
    if x.numel() < _FRAME:
        return np.zeros(0)
    frames = x.unfold(0, _FRAME, _HOP)
    frames = frames - frames.mean(dim=1, keepdim=True)
    energy = (frames * frames).sum(dim=1)
    spectrum = torch.fft.rfft(frames, n=2 * _FRAME)
    autocorr = torch.fft.irfft(spectrum.abs() ** 2, n=2 * _FRAME)[:, :_FRAME]
    lo, hi = int(RATE / fmax), int(RATE / fmin)
    peak, index = autocorr[:, lo:hi].max(dim=1)
    nccf = peak / energy.clamp_min(1e-12)
    loud = energy > energy.max() * 1e-3
    voiced = (nccf > _VOICED_NCCF) & loud
    lags = (index + lo).to(torch.float64)
    # Parabolic interpolation around the peak: sub-sample lag, so F0 is not quantised.
    left = autocorr.gather(1, (index + lo - 1).unsqueeze(1)).squeeze(1)
    right = autocorr.gather(1, (index + lo + 1).clamp_max(_FRAME - 1).unsqueeze(1)).squeeze(1)
    denom = left - 2 * peak + right
    shift = torch.where(denom.abs() > 1e-12, 0.5 * (left - right) / denom,
                        torch.zeros_like(denom))
    f0 = RATE / (lags + shift.clamp(-0.5, 0.5))
    voiced_f0: np.ndarray = f0[voiced].numpy()
    return voiced_f0


def count_syllables(text: str) -> int:
    """Han characters plus vowel groups of Latin words (at least one per word)."""
    han = len(_HAN.findall(text))
    latin = sum(max(1, len(_VOWEL_GROUPS.findall(w))) for w in _LATIN_WORD.findall(text))
    return han + latin


def measure(audio: Audio, prompt_text: str | None, encoder: SpeakerEncoder) -> VoiceMeasures:
    audio = Audio(to_16k(audio), RATE)  # once: the pitch tracker and the encoder both want 16 kHz
    f0 = pitch_track(audio)
    median = float(np.median(f0)) if f0.size >= 5 else None
    spread = None
    if f0.size >= 5:
        lo, hi = np.percentile(f0, [10, 90])
        spread = round(float(12 * np.log2(hi / lo)), 2)
    rate = None
    speech = speech_seconds(audio)
    if prompt_text and speech > 0:
        syllables = count_syllables(prompt_text)
        rate = round(syllables / speech, 2) if syllables else None
    return VoiceMeasures(embedding=encoder.embed(audio),
                         median_f0_hz=round(median, 1) if median else None,
                         f0_range_semitones=spread, speaking_rate=rate)
