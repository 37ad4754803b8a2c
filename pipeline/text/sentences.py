"""Sentence splitting: long text -> pieces an engine can read in one call.

masked text (annotations are single placeholder characters) -> cut after sentence ends
(。！？；!?; a "." before a space that does not end an abbreviation; a line break), each cut
keeping its closing quotes -> any sentence still longer than `max_chars` is cut again at the
last comma-like mark that fits, then at the last space, and only then at `max_chars` itself
-> pieces of punctuation alone join the piece before them. No cut ever lands right before a
placeholder, so an annotation stays with the character or word it reads.
"""

from __future__ import annotations

import re

from pipeline.text.annotations import is_placeholder

_CLOSERS = r"[”’\"'」』）)\]]*"  # closing quotes and brackets stay with their sentence
_END = re.compile(rf"(?:[。！？!?；;]+|…+|\.{{3}}|(?<!\.)\.(?={_CLOSERS}(?:\s|$))){_CLOSERS}|\n")
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc",
                            "e.g", "i.e", "no", "fig", "approx", "dept", "inc", "ltd", "co",
                            "mt", "u.s", "a.m", "p.m"})
_COMMA = re.compile(r"[，、,：:—–]+\s*")
_WORD_BEFORE = re.compile(r"([A-Za-z.]+)\.$")
_ONLY_PUNCT = re.compile(r"[\W_]*")


def split(text: str, max_chars: int) -> list[str]:
    """Sentences of `text`, none longer than `max_chars` characters."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    pieces: list[str] = []
    for sentence in _sentences(text):
        pieces.extend(_fit(sentence, max_chars))
    merged: list[str] = []
    for piece in pieces:
        if merged and _ONLY_PUNCT.fullmatch(piece) and not any(map(is_placeholder, piece)) \
                and len(merged[-1]) + len(piece) <= max_chars:
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _END.finditer(text):
        if m.group(0).startswith(".") and _is_abbreviation(text[start:m.end()]):
            continue
        out.append(text[start:m.end()])
        start = m.end()
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _is_abbreviation(sentence: str) -> bool:
    m = _WORD_BEFORE.search(sentence.rstrip("\"'”’)]"))
    return m is not None and m.group(1).lower() in _ABBREVIATIONS


def _fit(sentence: str, max_chars: int) -> list[str]:
    out: list[str] = []
    rest = sentence
    while len(rest) > max_chars:
        cut = _cut(rest, max_chars)
        out.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        out.append(rest)
    return [p for p in out if p]


def _cut(text: str, max_chars: int) -> int:
    """Where to end the first piece: the last comma, else space, else character that fits."""
    window = text[: max_chars + 1]
    commas = [m.end() for m in _COMMA.finditer(window) if m.end() <= max_chars]
    spaces = [m.end() for m in re.finditer(r"\s+", window) if m.start() > 0 and
              m.end() <= max_chars]
    for candidates in (commas, spaces):
        good = [c for c in candidates if c < len(text) and not is_placeholder(text[c])]
        if good:
            return good[-1]
    cut = max_chars
    while cut > 1 and is_placeholder(text[cut]):
        cut -= 1  # keep "好" and its "[h][ào]" together
    return cut
