"""The text front-end: one request's text and instruction -> what the engine reads.

prepare(text, language, instruct):
  instruct -> text.instructions.parse -> StyleHints (+ the language a dialect implies)
  text -> markup.find (validated; bad markup is InvalidRequest(invalid_request))
       -> language: the request's tag normalised, else detected from the script (a
          dialect such as 粤语 re-routes Chinese text to yue)
       -> markup.mask -> normalize (numbers, dates, money, units) -> length check
          (text_too_long) -> sentences.split (pieces short enough for one engine call)
       -> markup.unmask: every sentence carries its annotations as written.
The synthesis stage turns each sentence into a SynthesisItem(style=...) and joins the
sentence audio with pipeline.stitch.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pipeline.engines.base import StyleHints
from pipeline.text import annotations as markup
from pipeline.text import instructions, sentences
from pipeline.text.language import CHINESE, detect, normalise_tag, primary
from pipeline.text.normalize import normalize
from topics.errors import ErrorCode, InvalidRequest

MAX_CHARS = 2000  # DESIGN.md: request text after normalisation
# Longest piece per engine call. Hanzi carry a syllable each, so Chinese pieces are shorter;
# CosyVoice's own front-end aims at about 80 tokens a piece.
PIECE_CHARS = {"zh": 80, "yue": 80, "ja": 80, "ko": 120}
DEFAULT_PIECE_CHARS = 250


@dataclass(frozen=True)
class PreparedText:
    language: str  # normalised tag: zh, yue, en, fr, en-gb, ...
    sentences: list[str]  # normalised, annotations kept, each <= the piece length
    style: StyleHints
    detected: bool  # True when the request gave no language and we chose it


def prepare(text: str, *, language: str | None, instruct: str | None,
            max_chars: int = MAX_CHARS, max_piece_chars: int | None = None,
            languages: Collection[str] | None = None) -> PreparedText:
    """Validate and normalise `text`; `languages`, if given, are the ones the engine reads."""
    instruction = instructions.parse(instruct)
    clean = markup.strip_private_use(text)
    found = markup.find(clean)
    masked = markup.mask(clean, found)
    if language is not None and language.strip():
        tag, detected = normalise_tag(language), False
    else:
        tag, detected = detect(masked), True
        if instruction.language is not None and tag in CHINESE:
            tag = instruction.language
    if languages is not None and tag not in languages and primary(tag) not in languages:
        raise InvalidRequest(ErrorCode.UNSUPPORTED_LANGUAGE,
                             f"language {tag!r} is not supported by this engine; supported: "
                             f"{', '.join(sorted(languages))}")
    normalised = normalize(masked, tag)
    length = len(markup.unmask(normalised, clean, found))
    if length > max_chars:
        raise InvalidRequest(ErrorCode.TEXT_TOO_LONG,
                             f"text is {length} characters after normalisation; "
                             f"the limit is {max_chars}")
    if not any(ch.isalnum() or markup.is_placeholder(ch) for ch in normalised):
        raise InvalidRequest(ErrorCode.INVALID_REQUEST, "text has nothing to speak")
    piece = max_piece_chars or PIECE_CHARS.get(primary(tag), DEFAULT_PIECE_CHARS)
    pieces = sentences.split(normalised, piece)
    return PreparedText(language=tag,
                        sentences=[markup.unmask(p, clean, found) for p in pieces],
                        style=instruction.style, detected=detected)
