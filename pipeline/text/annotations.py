"""Pronunciation annotations in request text: find them, validate them, keep them intact.

Two kinds, both in square brackets right where they apply:
- pinyin `好[h][ào]` / `好[h][ao4]` / `爱[][ài]`: initial and final (tone mark or digit 1-5)
  after a Han character; it replaces pypinyin's reading of that character;
- ARPAbet `[R][EH1][D]`: CMU phonemes with stress digits on vowels; right after a Latin
  word (`read[R][EH1][D]`) it replaces that word's pronunciation, on its own it is spoken.

text -> `find` scans every bracket group once, left to right, and returns `Annotation`s
(raising InvalidRequest with the annotation and its 0-based character offset when one is
malformed) -> `mask` swaps each annotation and control tag for one private-use character so
that normalisation and sentence splitting cannot touch or cut them -> `unmask` puts the
markup back. Engines call `segments` to read a sentence as plain text plus overrides.
Brackets that are neither (`[1]`, `[sic]`, CosyVoice's `[breath]`) are left alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from pypinyin.pinyin_dict import pinyin_dict

from topics.errors import ErrorCode, InvalidRequest

ARPABET_VOWELS = frozenset({"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY",
                            "OW", "OY", "UH", "UW"})
ARPABET_CONSONANTS = frozenset({"B", "CH", "D", "DH", "F", "G", "HH", "JH", "K", "L", "M", "N",
                                "NG", "P", "R", "S", "SH", "T", "TH", "V", "W", "Y", "Z", "ZH"})
PINYIN_INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h",
                   "j", "q", "x", "r", "z", "c", "s", "y", "w")
# Non-speech tags CosyVoice understands; they pass through the front-end untouched.
CONTROL_TAGS = frozenset({"breath", "quick_breath", "laughter", "cough", "clucking", "accent",
                          "hissing", "sigh", "vocalized-noise", "lipsmack", "mn", "noise"})

_GROUP = re.compile(r"\[([^\[\]\s]{0,16})\]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
_ARPABET_SHAPE = re.compile(r"[A-Z]{1,3}[0-9]?")
_INITIAL_SHAPE = re.compile(r"[a-z]{0,4}")
# A final carries at least one letter, so citation marks like "[1][2]" are never pinyin.
_FINAL_SHAPE = re.compile(r"[a-zü\u00e0-\u01dc:]+[0-9]?")
_LATIN_WORD_END = re.compile(r"[A-Za-z']+$")
_TONE_MARKS = {"\u0304": 1, "\u0301": 2, "\u030c": 3, "\u0300": 4}
PLACEHOLDER_BASE = 0xE000  # Unicode private use area: never in text a client means to send


@dataclass(frozen=True)
class PinyinAnnotation:
    start: int  # offset of the first "[" in the text
    end: int
    char_index: int  # the Han character it reads
    syllable: str  # numbered pinyin as pypinyin's TONE3 style writes it: "hao4", "lv4"


@dataclass(frozen=True)
class PhonemeAnnotation:
    start: int
    end: int
    phonemes: tuple[str, ...]  # ARPAbet, e.g. ("R", "EH1", "D")
    word_start: int | None  # where the word it replaces begins; None when it stands alone


@dataclass(frozen=True)
class ControlTag:
    start: int
    end: int
    name: str


Annotation = PinyinAnnotation | PhonemeAnnotation | ControlTag


@cache
def _syllables() -> frozenset[str]:
    """Every toneless Mandarin syllable pypinyin knows, ü written v (its TONE3 spelling)."""
    out: set[str] = set()
    for readings in pinyin_dict.values():
        for reading in readings.split(","):
            out.add(_strip_tone(reading)[0])
    return frozenset(s for s in out if s.isascii() and s.isalpha())


@cache
def _finals() -> frozenset[str]:
    out = set()
    for syllable in _syllables():
        initial = next((i for i in PINYIN_INITIALS if syllable.startswith(i)), "")
        out.add(syllable[len(initial):])
    return frozenset(f for f in out if f)


def _strip_tone(written: str) -> tuple[str, int | None, int]:
    """(toneless spelling with ü as v, tone from marks or None, number of marks)."""
    tone: int | None = None
    marks = 0
    letters: list[str] = []
    for ch in unicodedata.normalize("NFD", written):
        if ch in _TONE_MARKS:
            tone, marks = _TONE_MARKS[ch], marks + 1
        elif ch == "\u0308":  # combining diaeresis: u + ¨ is ü
            letters[-1:] = ["v"]
        else:
            letters.append(ch)
    return "".join(letters).replace("u:", "v"), tone, marks


def _pinyin_syllable(initial: str, final: str) -> str:
    """Numbered syllable for [initial][final]; ValueError says what is wrong."""
    if initial and initial not in PINYIN_INITIALS:
        raise ValueError(f"{initial!r} is not a pinyin initial")
    digit = final[-1] if final[-1:].isdigit() else ""
    body, mark_tone, marks = _strip_tone(final[:-1] if digit else final)
    if marks > 1:
        raise ValueError(f"{final!r} has {marks} tone marks; a syllable has one")
    if digit and mark_tone is not None:
        raise ValueError(f"{final!r} has both a tone mark and a tone digit")
    if digit and digit not in "12345":
        raise ValueError(f"{final!r}: tone digit must be 1-5 (5 = neutral)")
    if not digit and mark_tone is None:
        raise ValueError(f"{final!r} has no tone: add a mark (ào) or a digit 1-5 (ao4)")
    if body not in _finals():
        raise ValueError(f"{body!r} is not a pinyin final")
    if initial in {"j", "q", "x", "y"} and body.startswith("v"):
        body = "u" + body[1:]  # ü after j/q/x/y is written u
    syllable = initial + body
    if syllable not in _syllables():
        raise ValueError(f"{initial!r} + {body!r} is not a Mandarin syllable")
    return f"{syllable}{digit or mark_tone}"


def _phoneme_error(symbol: str) -> str | None:
    base, stress = (symbol[:-1], symbol[-1]) if symbol[-1].isdigit() else (symbol, "")
    if base in ARPABET_VOWELS:
        if not stress:
            return f"{symbol!r} is a vowel and needs a stress digit 0, 1 or 2 (e.g. {base}1)"
        if stress not in "012":
            return f"{symbol!r} has stress {stress}; ARPAbet stress is 0, 1 or 2"
        return None
    if base in ARPABET_CONSONANTS:
        return f"{symbol!r} is a consonant and takes no stress digit" if stress else None
    return f"{base!r} is not an ARPAbet phoneme"


def _invalid(kind: str, markup: str, start: int, why: str) -> InvalidRequest:
    return InvalidRequest(ErrorCode.INVALID_REQUEST,
                          f"invalid {kind} annotation {markup} at char {start}: {why}")


def find(text: str) -> list[Annotation]:
    """Every annotation and control tag in `text`, validated, in order."""
    groups = list(_GROUP.finditer(text))
    found: list[Annotation] = []
    i = 0
    while i < len(groups):
        g = groups[i]
        content = g.group(1)
        if content.lower() in CONTROL_TAGS:
            found.append(ControlTag(g.start(), g.end(), content.lower()))
            i += 1
        elif _ARPABET_SHAPE.fullmatch(content):
            run = _adjacent_run(groups, i, _ARPABET_SHAPE.fullmatch)
            phonemes = _phonemes(text, run)
            if phonemes is not None:
                found.append(phonemes)
            i += len(run)
        elif _INITIAL_SHAPE.fullmatch(content) or _FINAL_SHAPE.fullmatch(content):
            annotation, used = _pinyin(text, groups, i)
            if annotation is not None:
                found.append(annotation)
            i += used
        else:
            i += 1
    return found


def _adjacent_run(groups: list[re.Match[str]], i: int,
                  shape: Callable[[str], re.Match[str] | None]) -> list[re.Match[str]]:
    run = [groups[i]]
    for g in groups[i + 1:]:
        if g.start() != run[-1].end() or not shape(g.group(1)):
            break
        run.append(g)
    return run


def _phonemes(text: str, run: list[re.Match[str]]) -> PhonemeAnnotation | None:
    symbols = [g.group(1) for g in run]
    looks_meant = (len(symbols) > 1 or any(s[-1].isdigit() for s in symbols)
                   or _phoneme_error(symbols[0]) is None)
    if not looks_meant:
        return None  # a lone "[UK]" or "[NB]" is text, not a phoneme
    start, end = run[0].start(), run[-1].end()
    for symbol in symbols:
        why = _phoneme_error(symbol)
        if why is not None:
            raise _invalid("phoneme", text[start:end], start, why)
    word = _LATIN_WORD_END.search(text, 0, start)
    return PhonemeAnnotation(start, end, tuple(symbols),
                             word.start() if word is not None else None)


def _pinyin(text: str, groups: list[re.Match[str]],
            i: int) -> tuple[PinyinAnnotation | None, int]:
    g = groups[i]
    after_han = g.start() > 0 and _HAN.fullmatch(text[g.start() - 1]) is not None
    nxt = groups[i + 1] if i + 1 < len(groups) else None
    if (nxt is None or nxt.start() != g.end() or not _INITIAL_SHAPE.fullmatch(g.group(1))
            or not _FINAL_SHAPE.fullmatch(nxt.group(1))):
        if after_han and g.group(1) and _looks_like_syllable(g.group(1)):
            raise _invalid("pinyin", g.group(0), g.start(),
                           "write the initial and the final in two brackets, e.g. [h][ào]")
        return None, 1
    markup = text[g.start():nxt.end()]
    if not after_han:
        raise _invalid("pinyin", markup, g.start(), "it must follow the Han character it reads")
    try:
        syllable = _pinyin_syllable(g.group(1), nxt.group(1))
    except ValueError as exc:
        raise _invalid("pinyin", markup, g.start(), str(exc)) from None
    return PinyinAnnotation(g.start(), nxt.end(), g.start() - 1, syllable), 2


def _looks_like_syllable(content: str) -> bool:
    body = _strip_tone(content.rstrip("0123456789"))[0]
    return body in _syllables()


def mask(text: str, annotations: list[Annotation]) -> str:
    """`text` with each annotation replaced by one private-use placeholder character."""
    out: list[str] = []
    pos = 0
    for n, a in enumerate(annotations):
        out.append(text[pos:a.start])
        out.append(chr(PLACEHOLDER_BASE + n))
        pos = a.end
    out.append(text[pos:])
    return "".join(out)


def unmask(masked: str, text: str, annotations: list[Annotation]) -> str:
    """Undo `mask`: each placeholder becomes its annotation's markup from `text` again."""
    def markup(m: re.Match[str]) -> str:
        a = annotations[ord(m.group(0)) - PLACEHOLDER_BASE]
        return text[a.start:a.end]
    return _placeholders(len(annotations)).sub(markup, masked) if annotations else masked


@cache
def _placeholders(count: int) -> re.Pattern[str]:
    return re.compile(f"[{chr(PLACEHOLDER_BASE)}-{chr(PLACEHOLDER_BASE + count - 1)}]")


def is_placeholder(ch: str) -> bool:
    return PLACEHOLDER_BASE <= ord(ch) < PLACEHOLDER_BASE + 0x1900


def strip_private_use(text: str) -> str:
    """Drop private-use characters from client text so placeholders stay unambiguous."""
    return "".join(ch for ch in text if not (0xE000 <= ord(ch) <= 0xF8FF))


@dataclass(frozen=True)
class Segments:
    """A sentence read for an engine: markup removed, overrides keyed by position."""

    plain: str  # the text without any annotation or tag
    pinyin: dict[int, str]  # index into `plain` of a Han character -> numbered syllable
    phonemes: list[tuple[int, int, tuple[str, ...]]]  # (start, end) in `plain` -> ARPAbet


def segments(text: str) -> Segments:
    """Split `text` (already validated) into plain text and the overrides it asks for."""
    plain: list[str] = []
    length = 0
    pinyin: dict[int, str] = {}
    phonemes: list[tuple[int, int, tuple[str, ...]]] = []
    pos = 0
    for a in find(text):
        piece = text[pos:a.start]
        plain.append(piece)
        length += len(piece)
        if isinstance(a, PinyinAnnotation):
            pinyin[length - 1] = a.syllable
        elif isinstance(a, PhonemeAnnotation):
            word_len = a.start - a.word_start if a.word_start is not None else 0
            phonemes.append((length - word_len, length, a.phonemes))
        pos = a.end
    plain.append(text[pos:])
    return Segments("".join(plain), pinyin, phonemes)


def inpainting_form(text: str) -> str:
    """Our annotations rewritten the way CosyVoice 3 reads them: in place of what they read.

    Ours follow the character or word (`给[j][ǐ]`, `read[R][EH1][D]`) so the text stays
    readable and other engines can fall back to it; CosyVoice's pronunciation inpainting
    wants the markup instead of the character (`[j][ǐ]`) or word (`[R][EH1][D]`).
    """
    out: list[str] = []
    pos = 0
    for a in find(text):
        if isinstance(a, PinyinAnnotation):
            out.append(text[pos:a.char_index])
        elif isinstance(a, PhonemeAnnotation) and a.word_start is not None:
            out.append(text[pos:a.word_start])
        else:
            out.append(text[pos:a.start])
        out.append(text[a.start:a.end])
        pos = a.end
    out.append(text[pos:])
    return "".join(out)
