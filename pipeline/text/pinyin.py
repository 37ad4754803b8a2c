"""Hanzi -> numbered pinyin, with `[h][ào]` annotations overriding pypinyin's reading.

sentence -> `annotations.segments` (markup out, overrides keyed by character) -> each run of
Han characters to pypinyin as one phrase, so its word-level polyphone choices still apply
(银行 -> yin2 hang2) -> the annotated characters swapped for their syllables -> one string
of numbered syllables with non-Han text passed through. Numbered pinyin (tone 5 neutral,
ü as v) is what espeak-ng's `cmn-latn-pinyin` voice reads; its `cmn` voice in 1.51 reads
tone digits as English numbers.
"""

from __future__ import annotations

import re
from typing import Any, cast

from pypinyin import Style, lazy_pinyin

from pipeline.text.annotations import segments

_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]+")
_CJK_PUNCT = str.maketrans({"，": ", ", "。": ". ", "！": "! ", "？": "? ", "；": "; ",
                            "：": ": ", "、": ", ", "“": " ", "”": " ", "‘": " ", "’": " ",
                            "（": ", ", "）": ", ", "《": " ", "》": " ", "…": "... ",
                            "—": ", ", "～": " "})


def syllables(text: str) -> list[tuple[str, str]]:
    """(character, numbered syllable) for each Han character of annotated `text`."""
    seg = segments(text)
    out: list[tuple[str, str]] = []
    for run in _HAN_RUN.finditer(seg.plain):
        read = _read(run.group(0))
        for offset, (ch, syllable) in enumerate(zip(run.group(0), read, strict=True)):
            out.append((ch, seg.pinyin.get(run.start() + offset, syllable)))
    return out


def hanzi_to_pinyin(text: str) -> str:
    """Numbered pinyin for the Han characters; other text passes through unchanged."""
    seg = segments(text)
    plain = seg.plain
    pieces: list[str] = []
    pos = 0
    for run in _HAN_RUN.finditer(plain):
        pieces.append(plain[pos:run.start()].translate(_CJK_PUNCT))
        read = _read(run.group(0))
        pieces.extend(f" {seg.pinyin.get(run.start() + i, s)} " for i, s in enumerate(read))
        pos = run.end()
    pieces.append(plain[pos:].translate(_CJK_PUNCT))
    joined = "".join(pieces)
    # Punctuation hugs the syllable before it, as in written pinyin: "hao3, shi4".
    return re.sub(r"\s+([,.!?;:])", r"\1", " ".join(joined.split()))


def _one_per_char(chars: str) -> list[str]:
    return list(chars)  # pypinyin accepts a list: one item per unknown character


def _read(run: str) -> list[str]:
    read = lazy_pinyin(run, style=Style.TONE3, neutral_tone_with_five=True,
                       errors=cast(Any, _one_per_char))
    if len(read) != len(run):  # pypinyin gives one item per Han character; keep that true
        raise RuntimeError(f"pypinyin returned {len(read)} syllables for {len(run)} chars")
    return read
