"""Consent threshold: false accepts and false rejects of the speaker match (pipeline.consent).

speakers (espeak-ng voice + variant + pitch: a different setting is a different "speaker")
  -> each says the consent statement (the consent recording) and two other sentences (its
     voice samples), espeak-ng -> WAV, checked by pipeline.consent.check_recording
  -> one GE2E embedding per clip (pipeline.speaker's encoder, as the gateway uses it)
  -> genuine trials: a speaker's consent against its own samples; impostor trials: against
     every other speaker's samples
  -> per threshold: FAR (impostors at or above it) and FRR (genuine below it); the chosen
     threshold's rates and the closest impostor pairs as figures `consent_*`.
No Kafka or S3: `voicefactory bench consent` runs it alone, `bench --only consent` within the
run. The project ships no recordings of real people (third_party holds source code only), so
espeak-ng's voices are the whole set; docs/voices.md says what that does and does not show.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.outcome import Outcome, md_table
from pipeline.audio import decode
from pipeline.consent import DEFAULT_THRESHOLD, check_recording, statement_for
from pipeline.speaker import SpeakerEncoder

# espeak-ng applies a +variant only to a voice named by its file ("en", not "en-gb"): en-gb+m3
# is plain en-gb, so `score` refuses two speakers that sound byte-identical.
BASES = ("en", "en-us", "en-gb-scotland", "en-029", "de", "fr")
VARIANTS = ("", "m3", "f2", "klatt")
PITCHES = (25, 75)  # en-us again, at other pitches than espeak's default 50
SAMPLES = ("The train to the coast leaves at seven, so we packed our bags the night before.",
           "Please remember to water the plants on the balcony while I am away next week.")
THRESHOLDS = (0.70, 0.80, 0.85, *(round(0.88 + 0.01 * i, 2) for i in range(9)))  # .. 0.96


@dataclass(frozen=True)
class Speaker:
    voice: str
    variant: str = ""
    pitch: int = 50

    @property
    def name(self) -> str:
        return self.voice + (f"+{self.variant}" if self.variant else "") + \
            (f" p{self.pitch}" if self.pitch != 50 else "")


def speakers(quick: bool = False) -> list[Speaker]:
    bases = BASES[:3] if quick else BASES
    found = [Speaker(b, v) for b in bases for v in VARIANTS]
    return found + [Speaker("en-us", "", p) for p in PITCHES]


def speak(speaker: Speaker, text: str) -> bytes:
    voice = speaker.voice + (f"+{speaker.variant}" if speaker.variant else "")
    done = subprocess.run(["espeak-ng", "-v", voice, "-p", str(speaker.pitch), "-s", "150",
                           "--stdout", text], capture_output=True, check=True, timeout=60)
    return done.stdout


@dataclass
class Scores:
    genuine: list[tuple[str, float]]  # (speaker, cosine) of its consent vs its own samples
    impostor: list[tuple[str, str, float]]  # (consent's speaker, sample's speaker, cosine)
    # impostor pairs of one timbre (variant and pitch) in two languages: espeak-ng's
    # languages change pronunciation, not the voice, and GE2E hears one voice
    accent_only: set[tuple[str, str]]


def score(found: list[Speaker], encoder: SpeakerEncoder) -> Scores:
    consent: dict[str, np.ndarray] = {}
    samples: dict[str, list[np.ndarray]] = {}
    heard: dict[bytes, str] = {}
    for s in found:
        data = speak(s, statement_for("Alex Morgan"))
        if heard.setdefault(data, s.name) != s.name:
            raise ValueError(f"espeak-ng speakers {heard[data]} and {s.name} are identical")
        clip = check_recording(data)
        consent[s.name] = encoder.embed(clip)
        samples[s.name] = [encoder.embed(decode(speak(s, t))) for t in SAMPLES]
    genuine, impostor = [], []
    timbre = {s.name: (s.variant, s.pitch) for s in found}
    for a, b in itertools.product(consent, samples):
        for emb in samples[b]:
            cos = float(np.dot(consent[a], emb))  # both unit norm
            if a == b:
                genuine.append((a, cos))
            else:
                impostor.append((a, b, cos))
    accent = {(a, b) for a, b, _ in impostor if timbre[a] == timbre[b]}
    return Scores(genuine, impostor, accent)


def rates(scores: Scores, threshold: float) -> tuple[float, float, float, float]:
    """(FAR over all impostors, FAR over impostors of another timbre, FAR over one timbre in
    another language, FRR) at `threshold`: a pair passes at cosine >= threshold."""
    timbre = [c for a, b, c in scores.impostor if (a, b) not in scores.accent_only]
    accent = [c for a, b, c in scores.impostor if (a, b) in scores.accent_only]
    return (_share([c >= threshold for *_, c in scores.impostor]),
            _share([c >= threshold for c in timbre]), _share([c >= threshold for c in accent]),
            _share([c < threshold for _, c in scores.genuine]))


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def outcome(scores: Scores, count: int, seconds: float) -> Outcome:
    far, far_timbre, far_accent, frr = rates(scores, DEFAULT_THRESHOLD)
    genuine = sorted(c for _, c in scores.genuine)
    closest = sorted(scores.impostor, key=lambda t: -t[2])[:3]
    rows = [[t, *[f"{r:.2%}" for r in rates(scores, t)]] for t in THRESHOLDS]
    figures: dict[str, float | int | None] = {
        "consent_threshold": DEFAULT_THRESHOLD, "consent_far": round(far, 4),
        "consent_far_other_timbre": round(far_timbre, 4),
        "consent_far_accent_only": round(far_accent, 4),
        "consent_frr": round(frr, 4), "consent_speakers": count,
        "consent_genuine_trials": len(scores.genuine),
        "consent_impostor_trials": len(scores.impostor),
        "consent_genuine_min": round(genuine[0], 4),
        "consent_genuine_median": round(float(np.median(genuine)), 4),
        "consent_impostor_max": round(closest[0][2], 4),
        "consent_impostor_median": round(float(np.median([c for *_, c in scores.impostor])), 4),
    }
    notes = [f"{count} espeak-ng speakers, {len(scores.genuine)} genuine and "
             f"{len(scores.impostor)} impostor trials, {seconds:.0f} s",
             "closest impostors: " + "; ".join(f"{a} consent vs {b} sample {c:.3f}"
                                                for a, b, c in closest),
             f"lowest genuine: {min(scores.genuine, key=lambda t: t[1])}"]
    return Outcome("consent", figures, md_table(["threshold", "FAR (all impostors)",
                                            "FAR (another timbre)",
                                            "FAR (one timbre, another language)", "FRR"], rows),
                   series={"genuine": genuine,
                           "impostor": sorted(c for *_, c in scores.impostor)},
                   notes=notes)


def measure(quick: bool = False) -> Outcome:
    started = time.monotonic()
    encoder = SpeakerEncoder()
    found = speakers(quick)
    return outcome(score(found, encoder), len(found), time.monotonic() - started)


async def run(ctx: Any) -> Outcome:
    """Within `voicefactory bench`: the same measurement, off the event loop."""
    return await asyncio.to_thread(measure, bool(getattr(ctx, "quick", False)))


def plot(series: dict[str, Any], ax: Any) -> None:
    bins = np.linspace(-0.2, 1.0, 49)
    ax.hist(series["impostor"], bins=bins, alpha=0.6, label="different speakers", density=True)
    ax.hist(series["genuine"], bins=bins, alpha=0.6, label="same speaker", density=True)
    ax.axvline(DEFAULT_THRESHOLD, color="k", linestyle="--", label="threshold")
    ax.set_xlabel("GE2E cosine, consent recording vs voice sample")
    ax.set_ylabel("density")
    ax.legend()
