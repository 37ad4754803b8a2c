"""Instruction parsing: a natural-language style request -> structured `StyleHints`.

request.instruct ("用四川话说，语气开心一点", "read it slowly, like a news anchor") -> each
cue table is searched for its first match (dialect, emotion, persona, speed) -> StyleHints
with the instruction kept verbatim in `free_text` for engines that take natural language
(CosyVoice instruct2), plus the language a dialect implies (粤语 -> yue) for requests that
gave none. Matching is keyword-based and says nothing about cues it does not know; an
instruction that matches no cue still reaches free-text engines unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.engines.base import StyleHints

# (pattern, value); first match wins, so more specific cues come first.
_DIALECTS: tuple[tuple[str, str], ...] = (
    (r"粤语|廣東話|广东话|粵語|白话|\bcantonese", "cantonese"),
    (r"四川话|四川話|川话|川渝|\bsichuan(?:ese)?", "sichuan"),
    (r"上海话|上海話|沪语|滬語|\bshanghai(?:nese)?", "shanghai"),
    (r"东北话|東北話|东北腔|\bdongbei|\bnorth-?eastern mandarin", "dongbei"),
    (r"天津话|天津話|\btianjin", "tianjin"),
    (r"河南话|河南話|\bhenan", "henan"),
    (r"山东话|山東話|\bshandong", "shandong"),
    (r"陕西话|陝西話|\bshaanxi", "shaanxi"),
    (r"闽南话|閩南話|闽南语|台语|台語|\bhokkien|\bminnan|\btaiwanese", "minnan"),
    (r"客家话|客家話|\bhakka", "hakka"),
    (r"长沙话|湖南话|\bchangsha|\bhunan", "changsha"),
    (r"普通话|普通話|\bmandarin", "mandarin"),
)
# The language each dialect is routed to when the request names none.
DIALECT_LANGUAGE = {"cantonese": "yue", "hakka": "hak"}

_EMOTIONS: tuple[tuple[str, str], ...] = (
    (r"悄悄|耳语|耳語|小声|小聲|轻声细语|\bwhisper", "whisper"),
    (r"悲伤|悲傷|伤心|傷心|难过|難過|哀伤|沮丧|\bsad|\bsorrowful|\bmelanchol", "sad"),
    (r"生气|生氣|愤怒|憤怒|恼火|\bangr(?:y|ily)|\bfurious|\bannoyed", "angry"),
    (r"惊讶|驚訝|吃惊|\bsurprised|\bastonished", "surprised"),
    (r"害怕|恐惧|恐懼|紧张|緊張|\bscared|\bafraid|\bfearful|\bnervous", "fearful"),
    (r"激动|激動|兴奋|興奮|\bexcited|\benthusiastic", "excited"),
    (r"开心|開心|高兴|高興|快乐|快樂|愉快|欢快|\bhappy|\bcheerful|\bjoyful", "happy"),
    (r"平静|平靜|冷静|温柔|溫柔|柔和|\bcalm|\bgentle|\bsoft(?:ly)?\b|\bsoothing", "calm"),
    (r"严肃|嚴肅|\bserious|\bstern", "serious"),
)
_PERSONAS: tuple[tuple[str, str], ...] = (
    (r"新闻主播|新聞主播|播音员|播音員|主持人|\bnews ?anchor|\bnewscaster|\bnews ?reader|"
     r"\bbroadcaster", "news_anchor"),
    (r"讲故事|講故事|说书|說書|\bstory ?tell|\bbedtime story|\btelling a story", "storyteller"),
    (r"小孩|孩子|儿童|兒童|小朋友|\bchild\b|\bkid\b|\bchildlike", "child"),
    (r"老人|老爷爷|老奶奶|\belderly|\bold (?:man|woman|person)", "elderly"),
    (r"客服|\bcustomer service|\bcall cent(?:er|re) agent", "customer_service"),
    (r"广告|廣告|\bcommercial|\badvert", "advertiser"),
)
# (pattern, multiplier) applied to the request's own speed; strongest cues first.
_SPEEDS: tuple[tuple[str, float], ...] = (
    (r"尽可能快|盡可能快|非常快|特别快|\bvery (?:fast|quickly)|\bas fast as", 1.5),
    (r"尽可能慢|盡可能慢|非常慢|特别慢|\bvery slow(?:ly)?|\bas slow(?:ly)? as", 0.65),
    (r"快一点|快一點|快点|快些|语速快|語速快|加快|快速|\bfast(?:er)?|\bquick(?:ly|er)?|\bbrisk",
     1.25),
    (r"慢一点|慢一點|慢点|慢些|语速慢|語速慢|放慢|缓慢|\bslow(?:ly|er)?|\bunhurried", 0.8),
)


@dataclass(frozen=True)
class Instruction:
    style: StyleHints
    language: str | None  # the language the dialect implies, if it implies one


def _first(table: tuple[tuple[str, str], ...], text: str) -> str | None:
    return next((value for pattern, value in table
                 if re.search(pattern, text, re.IGNORECASE)), None)


def parse(instruct: str | None) -> Instruction:
    """Style hints for `instruct`; None or blank gives empty hints."""
    if instruct is None or not instruct.strip():
        return Instruction(StyleHints(), None)
    text = instruct.strip()
    dialect = _first(_DIALECTS, text)
    speed = next((factor for pattern, factor in _SPEEDS
                  if re.search(pattern, text, re.IGNORECASE)), None)
    style = StyleHints(dialect=dialect, emotion=_first(_EMOTIONS, text),
                       persona=_first(_PERSONAS, text), speed=speed, free_text=text)
    return Instruction(style, DIALECT_LANGUAGE.get(dialect or ""))
