"""Normalisation entry point: pick the rules for the request's language.

(masked text, language) -> Chinese rules for zh/yue, English rules for en*, and for other
languages only whitespace tidying (espeak-ng reads digits in its own languages). Text
arrives with annotations masked (annotations.mask), so no rule can rewrite their digits.
"""

from __future__ import annotations

import re

from pipeline.text import normalize_en, normalize_zh
from pipeline.text.language import CHINESE, primary

_SPACE = re.compile(r"[ \t\u00a0\u3000]+")
_NEWLINES = re.compile(r"\s*\n\s*")
# Full-width digits, letters and the signs numbers use fold to ASCII so the rules match
# them; full-width punctuation (，。：) stays, it is how Chinese is written.
_FULL_WIDTH = {cp: cp - 0xFEE0 for cp in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B),
                                           *range(0xFF41, 0xFF5B), 0xFF05, 0xFF04, 0xFF0B,
                                           0xFF0D, 0xFF0F]}
_NUMERIC_PUNCT = re.compile(r"(?<=\d)[：．](?=\d)")


def normalize(text: str, language: str) -> str:
    text = text.translate(_FULL_WIDTH)
    text = _NUMERIC_PUNCT.sub(lambda m: ":" if m.group(0) == "：" else ".", text)
    text = _NEWLINES.sub("\n", _SPACE.sub(" ", text)).strip()
    if language in CHINESE:
        text = normalize_zh.normalize(text)
    elif primary(language) == "en":
        text = normalize_en.normalize(text)
    return _SPACE.sub(" ", text).strip()
