"""espeak-ng engine: real multilingual speech on the CPU, pitch and pace matched to the voice.

profile: the reference's median F0, F0 range and speaking rate (pipeline.speaker's
`VoiceMeasures`, or our own F0 estimate) -> features; a female-range F0 picks a female
voice variant. synthesize, per item: language tag -> espeak-ng voice (zh -> cmn-latn-pinyin
reading numbered pinyin with `[h][ào]` overrides, yue -> yue, en -> en-us, any other tag an
espeak-ng voice names) -> text as SSML (ARPAbet annotations as `[[...]]` phonemes, pitch
range as `<prosody range>`) -> `-p` chosen from a per-voice calibration so the output's
median F0 lands on the reference's, `-s` from speaking rate x request speed x style ->
`espeak-ng --stdout` -> WAV -> `Audio`. It does not clone timbre.
synthesize_stream streams by sentence: the item (one sentence from the front-end) is one
chunk. espeak-ng makes a sentence in a few milliseconds to a few tens (RTF ~0.02 on one
core), so reading its output in smaller windows would save next to nothing.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from xml.sax.saxutils import escape

import numpy as np

from pipeline.audio import Audio, AudioDecodeError, decode
from pipeline.engines.base import (
    AudioStream,
    Capabilities,
    EngineUnavailable,
    Profile,
    StyleHints,
    SynthesisItem,
    Synthesized,
    VoiceMeasures,
)
from pipeline.text import annotations as markup
from pipeline.text import instructions
from pipeline.text.language import detect, normalise_tag, primary
from pipeline.text.pinyin import hanzi_to_pinyin
from topics.errors import ErrorCode, InvalidRequest, VoiceFactoryError

BASE_RATE_WPM = 165
DEFAULT_PITCH = 50
FEMALE_F0_HZ = 165.0  # at or above: a female variant; the two variants overlap around here
NOMINAL_RATE_SPS = 4.5  # syllables/s of ordinary read speech; a reference at it keeps 165 wpm
NOMINAL_RANGE_ST = 6.0  # 10th-90th percentile F0 spread of read speech, espeak's 100% range
_TIMEOUT_S = 60
_CALIBRATION_PITCHES = (0, 25, 50, 75, 99)
_CALIBRATION_TEXT = {
    "cmn-latn-pinyin": "ni3 hao3, huan1 ying2 shou1 ting1 jin1 tian1 de5 xin1 wen2 bo1 bao4.",
    "yue": "早晨，今日天氣好好，我哋一齊去飲茶。",
}
_DEFAULT_CALIBRATION_TEXT = "This is a reference voice, speaking for a little while today."
_FIXED_VOICES = {"zh": "cmn-latn-pinyin", "yue": "yue", "en": "en-us", "hak": "hak"}


@dataclass(frozen=True)
class _Style:
    pitch: float = 1.0  # multiplier on the target F0
    rate: float = 1.0  # multiplier on words per minute
    range: float = 1.0  # multiplier on the pitch range
    amplitude: int = 100


# Modest on purpose: espeak-ng has no emotional voices, only pitch, pace and range to move.
_EMOTION = {
    "sad": _Style(pitch=0.94, rate=0.88, range=0.7),
    "happy": _Style(pitch=1.06, rate=1.05, range=1.3),
    "angry": _Style(pitch=1.04, rate=1.08, range=1.4, amplitude=125),
    "surprised": _Style(pitch=1.08, rate=1.0, range=1.5),
    "fearful": _Style(pitch=1.05, rate=1.1, range=0.9),
    "excited": _Style(pitch=1.08, rate=1.1, range=1.4, amplitude=115),
    "calm": _Style(rate=0.95, range=0.8, amplitude=90),
    "serious": _Style(pitch=0.97, rate=0.97, range=0.8),
    "whisper": _Style(rate=0.95, amplitude=120),
}
_PERSONA = {
    "news_anchor": _Style(rate=1.05, range=0.9),
    "storyteller": _Style(rate=0.92, range=1.3),
    "child": _Style(pitch=1.2, rate=1.05, range=1.2),
    "elderly": _Style(pitch=0.95, rate=0.88),
    "customer_service": _Style(pitch=1.04, range=1.1),
    "advertiser": _Style(pitch=1.03, rate=1.08, range=1.2),
}

# CMU ARPAbet -> espeak-ng's English phoneme mnemonics (as `espeak-ng -x` prints them).
_ARPABET_TO_ESPEAK = {
    "AA": "A:", "AE": "a", "AO": "O:", "AW": "aU", "AY": "aI", "EH": "E", "EY": "eI",
    "IH": "I", "IY": "i:", "OW": "oU", "OY": "OI", "UH": "U", "UW": "u:",
    "B": "b", "CH": "tS", "D": "d", "DH": "D", "F": "f", "G": "g", "HH": "h", "JH": "dZ",
    "K": "k", "L": "l", "M": "m", "N": "n", "NG": "N", "P": "p", "R": "r", "S": "s",
    "SH": "S", "T": "t", "TH": "T", "V": "v", "W": "w", "Y": "j", "Z": "z", "ZH": "Z",
}
_STRESS = {"0": "", "1": "'", "2": ","}
_OTHER_LANGUAGE = re.compile(r"\(([A-Za-z0-9-]+) (\d+)\)")  # "(zh-cmn 5)" in --voices


class EspeakEngine:
    name = "espeak"

    def __init__(self, binary: str = "espeak-ng") -> None:
        self._binary = binary
        self._voices: dict[str, str] = {}  # every name or tag espeak-ng answers to -> voice
        self._curves: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=("zh", "yue", "en", *sorted(set(self._voices) - {"zh", "yue", "en"})),
            modes=("zero_shot", "cross_lingual", "instruct", "sft"),
            batching=False,
            streaming=True,  # by sentence: synthesize_stream
            cloning="median pitch, pitch range and speaking rate of the reference, and a "
                    "male or female variant by pitch; timbre is espeak-ng's own",
        )

    def load(self) -> None:
        path = shutil.which(self._binary)
        if path is None:
            raise EngineUnavailable(f"{self._binary} not found on PATH; install it with "
                                    "`apt-get install espeak-ng` (or `make setup`)")
        self._binary = path
        listing = subprocess.run([path, "--voices"], capture_output=True, text=True,
                                 check=True, timeout=_TIMEOUT_S).stdout
        self._voices = parse_voices(listing)

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        f0 = measures.median_f0_hz or median_f0(reference)
        pitch = DEFAULT_PITCH if f0 is None else _pitch_for(f0)
        features = {"median_f0_hz": f0 or 0.0, "espeak_pitch": float(pitch),
                    "female": 1.0 if f0 is not None and f0 >= FEMALE_F0_HZ else 0.0,
                    "f0_range_semitones": measures.f0_range_semitones or 0.0,
                    "speaking_rate": measures.speaking_rate or 0.0}
        return Profile(voice_id=voice_id, sha256=sha256, engine=self.name, features=features)

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        return [self._one(profile, item) for item in batch]

    def synthesize_stream(self, profile: Profile, item: SynthesisItem) -> AudioStream:
        yield self._one(profile, item).audio

    def voice_for(self, language: str) -> str:
        """The espeak-ng voice for a normalised tag; UNSUPPORTED_LANGUAGE if there is none."""
        voice = _FIXED_VOICES.get(language) or self._voices.get(language) \
            or self._voices.get(primary(language))
        if voice is None or (self._voices and voice not in self._voices.values()):
            known = sorted(set(self._voices))
            raise InvalidRequest(ErrorCode.UNSUPPORTED_LANGUAGE,
                                 f"language {language!r} has no espeak-ng voice; known: "
                                 f"{', '.join(known[:30])}{' ...' if len(known) > 30 else ''}"
                                 " (all: `espeak-ng --voices`)")
        return voice

    def _one(self, profile: Profile, item: SynthesisItem) -> Synthesized:
        language = normalise_tag(item.language) if item.language else detect(item.text)
        voice = self.voice_for(language)
        style = item.style if item.style != StyleHints() else instructions.parse(
            item.instruct).style
        mods = _combine(_EMOTION.get(style.emotion or ""), _PERSONA.get(style.persona or ""))
        features = profile.features
        female = features.get("female", 0.0) >= 0.5
        variant = ("whisperf" if female else "whisper") if style.emotion == "whisper" \
            else ("f3" if female else "m3") if features.get("median_f0_hz") else ""
        full_voice = f"{voice}+{variant}" if variant else voice
        spread = features.get("f0_range_semitones", 0.0)
        range_pct = 100.0 if not spread else min(200.0, max(30.0, 100 * spread
                                                             / NOMINAL_RANGE_ST))
        range_pct = round(min(250.0, range_pct * mods.range) / 10) * 10
        target = features.get("median_f0_hz", 0.0) * mods.pitch
        pitch = (self._pitch_for_target(full_voice, range_pct, target) if target
                 else int(features.get("espeak_pitch", DEFAULT_PITCH)))
        rate_sps = features.get("speaking_rate", 0.0)
        pace = min(1.35, max(0.75, rate_sps / NOMINAL_RATE_SPS)) if rate_sps else 1.0
        rate = round(BASE_RATE_WPM * pace * item.speed * (style.speed or 1.0) * mods.rate)
        ssml = f'<speak><prosody range="{range_pct:.0f}%">{espeak_text(item.text, voice)}' \
               "</prosody></speak>"
        audio = self._run(full_voice, pitch, max(80, min(450, rate)), mods.amplitude, ssml)
        return Synthesized(audio=audio, language=language)

    def _run(self, voice: str, pitch: int, rate: int, amplitude: int, ssml: str) -> Audio:
        cmd = [self._binary, "-v", voice, "-p", str(pitch), "-s", str(rate), "-a",
               str(amplitude), "-m", "--stdin", "--stdout"]
        try:
            done = subprocess.run(cmd, input=ssml.encode("utf-8"), capture_output=True,
                                  timeout=_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, f"espeak-ng failed: {exc}") from exc
        if done.returncode != 0:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                    f"espeak-ng exited {done.returncode}: "
                                    f"{done.stderr.decode(errors='replace')[:200]}")
        try:
            return decode(done.stdout)
        except AudioDecodeError as exc:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, str(exc)) from exc

    def _pitch_for_target(self, voice: str, range_pct: float, target_hz: float) -> int:
        """The `-p` at which `voice` speaks with median F0 `target_hz` (clamped to 0-99)."""
        pitches, log_f0 = self._curve(voice, int(range_pct))
        return round(float(np.interp(math.log(target_hz), log_f0, pitches)))

    def _curve(self, voice: str, range_pct: int) -> tuple[list[float], list[float]]:
        # espeak-ng's -p is relative to each voice's own base pitch, and the range setting
        # moves the median too: measure each (voice, range) once, then interpolate.
        key = (voice, range_pct)
        with self._lock:
            if key in self._curves:
                return self._curves[key]
        base = voice.split("+")[0]
        text = escape(_CALIBRATION_TEXT.get(base, _DEFAULT_CALIBRATION_TEXT))
        ssml = f'<speak><prosody range="{range_pct}%">{text}</prosody></speak>'
        pitches: list[float] = []
        log_f0: list[float] = []
        for p in _CALIBRATION_PITCHES:
            f0 = median_f0(self._run(voice, p, BASE_RATE_WPM, 100, ssml))
            if f0 is not None and (not log_f0 or math.log(f0) > log_f0[-1]):
                pitches.append(float(p))
                log_f0.append(math.log(f0))  # np.interp needs increasing x
        if len(pitches) < 2:
            pitches, log_f0 = [float(DEFAULT_PITCH)] * 2, [0.0, 1.0e9]
        with self._lock:
            self._curves[key] = (pitches, log_f0)
        return pitches, log_f0


def parse_voices(listing: str) -> dict[str, str]:
    """`espeak-ng --voices` -> every tag, file name and alias -> the voice's language name.

    An alias several voices share ("fr" for fr-fr, fr-be, fr-ch) goes to the voice that
    lists it with the best (lowest) priority, as espeak-ng itself would choose.
    """
    best: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 5 or parts[4].startswith("mb/"):
            continue  # mbrola voices need the separate mbrola program and its databases
        language = parts[1].lower()
        ranked = [(0, language), (0, parts[4].split("/")[-1].lower())]
        ranked += [(int(rank), alias.lower())
                   for alias, rank in _OTHER_LANGUAGE.findall(" ".join(parts[5:]))]
        for rank, alias in ranked:
            if alias not in best or rank < best[alias][0]:
                best[alias] = (rank, language)
    return {alias: language for alias, (_, language) in best.items()}


def espeak_text(text: str, voice: str) -> str:
    """The SSML body espeak-ng reads for an annotated sentence."""
    if voice == "cmn-latn-pinyin":
        return escape(hanzi_to_pinyin(text))
    seg = markup.segments(text)
    if not voice.startswith("en"):
        return escape(seg.plain)  # ARPAbet is English; other voices read the word as written
    out: list[str] = []
    pos = 0
    for start, end, phonemes in seg.phonemes:
        out.append(escape(seg.plain[pos:start]))
        out.append(f"[[{arpabet_to_espeak(phonemes)}]]")
        pos = end
    out.append(escape(seg.plain[pos:]))
    return "".join(out)


def arpabet_to_espeak(phonemes: tuple[str, ...]) -> str:
    """ARPAbet (validated) -> espeak-ng phoneme input: ("R", "EH1", "D") -> "r'Ed"."""
    out: list[str] = []
    for symbol in phonemes:
        base, stress = (symbol[:-1], symbol[-1]) if symbol[-1].isdigit() else (symbol, "")
        if base == "AH":
            sound = "@" if stress == "0" else "V"  # unstressed AH is the schwa
        elif base == "ER":
            sound = "3" if stress == "0" else "3:"
        else:
            sound = _ARPABET_TO_ESPEAK[base]
        out.append(_STRESS.get(stress, "") + sound)
    return "".join(out)


def _combine(*styles: _Style | None) -> _Style:
    out = _Style()
    for s in styles:
        if s is not None:
            out = _Style(out.pitch * s.pitch, out.rate * s.rate, out.range * s.range,
                         round(out.amplitude * s.amplitude / 100))
    return out


def _pitch_for(f0_hz: float) -> int:
    # Rough, voice-independent: espeak-ng's pitch 50 is about 100-120 Hz for its male
    # voices, one octave ~ 40 steps. Only a fallback; synthesis calibrates per voice.
    return max(0, min(99, round(DEFAULT_PITCH + 40 * math.log2(f0_hz / 120.0))))


def median_f0(audio: Audio, fmin: float = 60.0, fmax: float = 400.0) -> float | None:
    """Median pitch of voiced 40-ms frames by normalised autocorrelation; None if unvoiced."""
    rate = audio.sample_rate
    frame = int(0.04 * rate)
    hop = frame // 2
    x = audio.samples.astype(np.float64)
    lo, hi = int(rate / fmax), int(rate / fmin)
    estimates = []
    for start in range(0, len(x) - frame, hop):
        seg = x[start : start + frame]
        seg = seg - seg.mean()
        energy = float(np.dot(seg, seg))
        if energy < 1e-4 * frame:
            continue
        corr = np.correlate(seg, seg, mode="full")[frame - 1 :]
        window = corr[lo : min(hi, frame - 1)]
        if window.size == 0:
            continue
        lag = int(np.argmax(window)) + lo
        if corr[lag] / energy > 0.5:
            estimates.append(rate / lag)
    return float(np.median(estimates)) if estimates else None
