"""Text front-end for the espeak engine: language resolution and Hanzi -> numbered pinyin.

request.language (or a guess from the script) -> a `LanguageRoute` naming the espeak-ng
voice and the text it should read. Mandarin goes to `cmn-latn-pinyin` as numbered pinyin,
because espeak-ng 1.51's `cmn` voice reads tone digits as English words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pypinyin import Style, lazy_pinyin

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_PUNCT = str.maketrans({"，": ", ", "。": ". ", "！": "! ", "？": "? ", "；": "; ",
                            "：": ": ", "、": ", ", "“": '"', "”": '"', "（": "(", "）": ")"})
MANDARIN_TAGS = {"zh", "zh-cn", "zh-hans", "zh-tw", "zh-hant", "cmn", "zh-cmn", "cmn-hans",
                 "mandarin"}
CANTONESE_TAGS = {"yue", "zh-yue", "zh-hk", "yue-hk", "yue-hant", "cantonese"}


@dataclass(frozen=True)
class LanguageRoute:
    language: str  # normalised tag reported in results: zh, yue, en, ...
    voice: str  # espeak-ng voice name
    text: str  # what espeak-ng reads


def guess_language(text: str) -> str:
    han = len(_HAN.findall(text))
    return "zh" if han and han >= len(text.strip()) * 0.2 else "en"


def hanzi_to_pinyin(text: str) -> str:
    """Numbered pinyin (tone 5 for neutral); non-Han runs pass through unchanged."""
    syllables = lazy_pinyin(text, style=Style.TONE3, neutral_tone_with_five=True,
                            errors=lambda chars: chars)
    out: list[str] = []
    for piece in syllables:
        piece = piece.translate(_CJK_PUNCT)
        if out and piece and piece[0].isalnum() and out[-1][-1:].isalnum():
            out.append(" ")
        out.append(piece)
    return " ".join("".join(out).split())


def route(text: str, language: str | None) -> LanguageRoute:
    tag = (language or guess_language(text)).strip().lower().replace("_", "-")
    if tag in MANDARIN_TAGS:
        return LanguageRoute("zh", "cmn-latn-pinyin", hanzi_to_pinyin(text))
    if tag in CANTONESE_TAGS:
        return LanguageRoute("yue", "yue", text.translate(_CJK_PUNCT))
    if tag in {"en", "en-us"}:
        return LanguageRoute("en", "en-us", text)
    return LanguageRoute(tag, tag, text)
