"""Text front-end building blocks (pipeline.frontend runs them in order).

language (tags, detection) -> instructions (style hints) -> annotations (validate, mask)
-> normalize (numbers, dates, money, units) -> sentences (split for the engine) ->
pinyin (Hanzi to numbered pinyin, for engines that read pinyin).
"""

from pipeline.text.language import detect, guess_language, normalise_tag
from pipeline.text.pinyin import hanzi_to_pinyin

__all__ = ["detect", "guess_language", "hanzi_to_pinyin", "normalise_tag"]
