"""What the CosyVoice adapter asks the model for, decided per item without touching torch.

SynthesisItem (+ the voice's transcript language) -> `plan_call`:
  - an instruction (item.instruct, else the front-end's StyleHints.free_text, else one
    derived from a structured dialect/emotion hint or a Cantonese target) -> instruct2;
  - no transcript for the reference, or a target language other than the transcript's
    -> cross_lingual (the LLM gets no prompt text, only the speaker);
  - otherwise zero_shot (prompt text + prompt speech tokens continue the reference).
The text strings follow each generation's prompt format: CosyVoice 3 expects a system
prefix ending in `<|endofprompt|>` before the transcript, the cross-lingual text and the
instruction; CosyVoice 2 expects only the instruction to end with `<|endofprompt|>`.
Pronunciation annotations: CosyVoice 3's tokenizer has one token per ARPAbet phone and pinyin
initial/final, so they go in its inpainting form (the markup in place of what it reads);
CosyVoice 2's has none, so the markup is dropped there and the text read as written.
The dialect and emotion phrasings are the ones upstream lists as trained
(`cosyvoice/utils/common.py`, `instruct_list`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, replace

from pipeline.engines.base import SynthesisItem
from pipeline.text import detect, normalise_tag
from pipeline.text.annotations import ControlTag, find, inpainting_form
from topics.errors import ErrorCode, VoiceFactoryError

END_OF_PROMPT = "<|endofprompt|>"
V3_SYSTEM_PROMPT = "You are a helpful assistant."

LANGUAGES_V2 = ("zh", "en", "yue", "ja", "ko")
LANGUAGES_V3 = (*LANGUAGES_V2, "de", "es", "fr", "it", "ru")

# Dialects and emotions with an instruction in upstream's trained list (CosyVoice 3 phrases
# them "请用X表达。" / "请非常X地说一句话。"; CosyVoice 2 was trained on "用X说这句话").
# Keys are StyleHints.dialect values; changsha (长沙话) is read as 湖南话, mandarin needs none.
DIALECTS = {"cantonese": "广东话", "dongbei": "东北话", "gansu": "甘肃话", "guizhou": "贵州话",
            "henan": "河南话", "hubei": "湖北话", "hunan": "湖南话", "changsha": "湖南话",
            "jiangxi": "江西话", "minnan": "闽南话", "ningxia": "宁夏话", "shanxi": "山西话",
            "shaanxi": "陕西话", "shandong": "山东话", "shanghai": "上海话", "sichuan": "四川话",
            "tianjin": "天津话", "yunnan": "云南话"}
NO_DIALECT = frozenset({"mandarin"})
EMOTIONS = {"happy": "开心", "sad": "伤心", "angry": "生气"}


@dataclass(frozen=True)
class Call:
    mode: str  # "zero_shot" | "cross_lingual" | "instruct"
    language: str  # what the audio is in, reported on the result
    text: str  # tts_text as the model takes it
    instruction: str | None = None  # instruct_text, formatted for the generation


def normalise_language(tag: str, generation: int) -> str:
    """A request's BCP-47 tag -> the language CosyVoice speaks, or `unsupported_language`."""
    language = normalise_tag(tag).split("-", 1)[0]  # zh-Hans-CN, cmn -> zh; zh-HK -> yue
    supported = LANGUAGES_V3 if generation >= 3 else LANGUAGES_V2
    if language not in supported:
        raise VoiceFactoryError(ErrorCode.UNSUPPORTED_LANGUAGE,
                                f"CosyVoice {generation} does not speak {tag!r}; it speaks "
                                f"{', '.join(supported)} (dialects through an instruction)")
    return language


def instruction_text(instruction: str, generation: int) -> str:
    """A natural-language instruction in the form the model was trained on."""
    text = instruction.strip()
    if END_OF_PROMPT in text:
        return text  # already formatted by the caller
    if generation >= 3:
        return f"{V3_SYSTEM_PROMPT} {text}{END_OF_PROMPT}"
    return f"{text}{END_OF_PROMPT}"


def prompt_text(transcript: str, generation: int) -> str:
    """The reference transcript as the LLM prompt (zero-shot speaker cache, zero_shot call)."""
    if generation >= 3 and END_OF_PROMPT not in transcript:
        return f"{V3_SYSTEM_PROMPT}{END_OF_PROMPT}{transcript}"
    return transcript


def derived_instruction(item: SynthesisItem, language: str, voice_language: str,
                        generation: int) -> str | None:
    """An instruction from structured hints, for items that carry no free text. A Cantonese
    target asks for Cantonese unless the reference already speaks it (zero-shot carries it)."""
    cantonese = language == "yue" and voice_language != "yue"
    dialect = item.style.dialect or ("cantonese" if cantonese else None)
    parts: list[str] = []
    if dialect is not None and dialect not in NO_DIALECT:
        name = DIALECTS.get(dialect)
        if name is None:
            raise VoiceFactoryError(ErrorCode.UNSUPPORTED_LANGUAGE,
                                    f"dialect {dialect!r} has no CosyVoice instruction; known: "
                                    f"{', '.join(sorted(DIALECTS))}")
        if generation >= 3:
            parts.append(f"请用{name}表达。")
        else:
            parts.append(f"用{'粤语' if dialect == 'cantonese' else name}说这句话")
    emotion = EMOTIONS.get(item.style.emotion or "")
    if emotion is not None:
        parts.append(f"请非常{emotion}地说一句话。" if generation >= 3
                     else f"用{emotion}的语气说这句话")
    return "".join(parts) or None


def without_pronunciations(text: str) -> str:
    """`text` with pinyin and ARPAbet annotations removed (control tags such as [breath],
    which CosyVoice 2's tokenizer knows, are kept)."""
    out: list[str] = []
    pos = 0
    for a in find(text):
        if isinstance(a, ControlTag):
            continue
        out.append(text[pos:a.start])
        pos = a.end
    out.append(text[pos:])
    return "".join(out)


def model_text(text: str, generation: int) -> str:
    """An item's text with its annotations in the form this generation's tokenizer reads."""
    return inpainting_form(text) if generation >= 3 else without_pronunciations(text)


def nothing_to_say(text: str) -> bool:
    """`text` (as `model_text` wrote it) is punctuation, symbols and spaces only: upstream
    drops such a sentence and returns no audio. Control tags alone count as nothing too."""
    for a in reversed([a for a in find(text) if isinstance(a, ControlTag)]):
        text = text[:a.start] + text[a.end:]
    return all(unicodedata.category(ch)[0] in "PSZC" for ch in text)


def plan_call(item: SynthesisItem, *, voice_language: str, has_transcript: bool,
              generation: int) -> Call:
    item = replace(item, text=model_text(item.text, generation))
    language = normalise_language(item.language or detect(item.text), generation)
    same_language = bool(voice_language) and language == voice_language
    instruction = (item.instruct or item.style.free_text
                   or derived_instruction(item, language, voice_language, generation))
    if instruction:
        return Call("instruct", language, item.text, instruction_text(instruction, generation))
    if not has_transcript or not same_language:
        text = item.text
        if generation >= 3 and END_OF_PROMPT not in text:
            text = f"{V3_SYSTEM_PROMPT}{END_OF_PROMPT}{text}"
        return Call("cross_lingual", language, text)
    return Call("zero_shot", language, item.text)
