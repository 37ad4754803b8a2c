"""Language tags: normalise what a request gives, detect what it leaves out.

request.language ("zh-CN", "Cantonese", "en_US", "fr") -> `normalise_tag` -> a lower-case
tag the rest of the pipeline agrees on: "zh" (Mandarin), "yue" (Cantonese), "en", or the
tag itself ("fr", "en-gb"). No language -> `detect` counts scripts: Han text is "zh" unless
it carries characters only written Cantonese uses (嘅 咗 喺 佢 冇 ...), kana is "ja",
Hangul "ko", and Latin text is "en" (telling French from English needs a model we do not
ship; a request in another Latin-script language should say so).
"""

from __future__ import annotations

import re

from topics.errors import ErrorCode, InvalidRequest

MANDARIN_TAGS = frozenset({
    "zh", "zh-cn", "zh-hans", "zh-hans-cn", "zh-sg", "zh-tw", "zh-hant", "zh-hant-tw",
    "cmn", "zh-cmn", "cmn-hans", "cmn-hant", "cmn-cn", "mandarin", "chinese", "putonghua",
})
CANTONESE_TAGS = frozenset({
    "yue", "zh-yue", "zh-hk", "zh-mo", "zh-hant-hk", "yue-hk", "yue-hant", "yue-hans",
    "yue-cn", "cantonese",
})
ENGLISH_TAGS = frozenset({"en", "en-us", "english"})
CHINESE = frozenset({"zh", "yue"})  # languages whose text is Hanzi and whose rules we share

# BCP-47 in the shape requests use: a 2-3 letter language, then subtags of 1-8 alphanumerics.
_TAG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
# Other scripts that name one language well enough for espeak-ng to read them.
_SCRIPTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[\u0400-\u04ff]"), "ru"),
    (re.compile(r"[\u0370-\u03ff]"), "el"),
    (re.compile(r"[\u0600-\u06ff]"), "ar"),
    (re.compile(r"[\u0590-\u05ff]"), "he"),
    (re.compile(r"[\u0e00-\u0e7f]"), "th"),
    (re.compile(r"[\u0900-\u097f]"), "hi"),
)
# Written Cantonese uses these for grammar words Mandarin writes differently (的/了/在/他/没).
# 係 is not on the list: traditional-script Mandarin writes 關係 with it.
CANTONESE_MARKERS = frozenset("嘅咗喺佢冇哋嘢啲嚟乜咩噉啱嗰諗攞睇唔")


def normalise_tag(tag: str) -> str:
    """The pipeline's tag for `tag`, or InvalidRequest(unsupported_language) if malformed."""
    clean = tag.strip().lower().replace("_", "-")
    if clean in MANDARIN_TAGS:
        return "zh"
    if clean in CANTONESE_TAGS:
        return "yue"
    if clean in ENGLISH_TAGS:
        return "en"
    if not _TAG.fullmatch(clean):
        raise InvalidRequest(ErrorCode.UNSUPPORTED_LANGUAGE,
                             f"language {tag!r} is not a BCP-47 tag (e.g. zh, yue, en, fr) "
                             "or a known name (mandarin, cantonese, english)")
    return clean


def primary(tag: str) -> str:
    """The language subtag: "en-gb" -> "en"."""
    return tag.split("-", 1)[0]


def detect(text: str) -> str:
    """A language tag from the script of `text`; "en" when nothing decides."""
    han = len(_HAN.findall(text))
    kana = len(_KANA.findall(text))
    hangul = len(_HANGUL.findall(text))
    latin = len(_LATIN.findall(text))
    if kana and kana + han >= latin:
        return "ja"
    if hangul and hangul >= max(han, latin):
        return "ko"
    letters = han + latin + hangul + kana
    if han and han >= letters * 0.2:
        return "yue" if any(ch in CANTONESE_MARKERS for ch in text) else "zh"
    if latin == 0:
        counts = [(len(pattern.findall(text)), lang) for pattern, lang in _SCRIPTS]
        best, lang = max(counts)
        if best:
            return lang
    return "en"


def guess_language(text: str) -> str:
    """Kept for callers that only need zh/en/...: the same as `detect`."""
    return detect(text)
