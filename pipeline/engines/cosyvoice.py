"""The `cosyvoice` engine: CosyVoice 2/3 through FunAudioLLM's Python API, from local weights.

load(): VF_COSYVOICE_MODEL_DIR checked, the package imported from VF_COSYVOICE_SOURCE or
  PYTHONPATH (cosyvoice_setup) -> DevicePlan from VF_DEVICE/VF_PRECISION ->
  CosyVoice2/CosyVoice3(model_dir, fp16=...) -> cosyvoice_runtime's changes to how upstream
  runs here (LLM-thread errors reach the caller, per-call streaming state, decode steps that
  attend to the whole history, WAV loading without torchcodec, no progress bars).
profile(reference, prompt_text): reference -> temporary WAV -> model.add_zero_shot_spk
  (speech tokens, mel features, CAM++ embedding: what frontend_zero_shot computes) ->
  numpy `Profile.tensors`, persisted by the profile tier as safetensors.
synthesize_voices([(profile, item), ...]) (synthesize(profile, items) is the one-voice case;
  the engine is a `VoiceMixer`): each voice's profile tensors -> torch on the model's device
  -> the frontend's zero-shot speaker cache (cosyvoice_speakers) under an id derived from
  voice_id + sha256, held for the call, so the model never recomputes prompt features -> per
  item, cosyvoice_prompts.plan_call picks zero-shot / cross-lingual / instruct2 -> two or more
  items: upstream's frontend_* model inputs -> cosyvoice_batch (the texts through the LLM
  together, then cosyvoice_flow: the flow's Euler steps together, HiFT each at its speed);
  one item (or an LLM the batch path cannot drive): upstream's inference_* (stream=False,
  text_frontend=False: our front-end has normalised and split the text), its chunks
  concatenated -> Audio at model.sample_rate. A sentence of punctuation only is a short
  silence, never a model row.
synthesize_stream(profile, item): the same call with stream=True, one `Audio` a chunk; at a
  speed other than 1.0 (upstream's is for whole clips) the item comes whole as one chunk.
Out-of-memory errors, in the caller's thread or upstream's LLM thread, become
`EngineOutOfMemory` (the worker splits the batch); other failures are retryable
`engine_error`s. With a speaker id, instruct2 would take the transcript as the instruction,
so instruct calls get a per-call copy of the speaker entry prompted with the instruction.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
import tempfile
import uuid
import warnings
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from pipeline.audio import Audio, Samples, encode_wav
from pipeline.engines.base import (
    AudioStream,
    Capabilities,
    EngineUnavailable,
    Profile,
    SynthesisItem,
    Synthesized,
    VoiceMeasures,
)
from pipeline.engines.cosyvoice_batch import batchable
from pipeline.engines.cosyvoice_batch import speech as batched_speech
from pipeline.engines.cosyvoice_prompts import (
    LANGUAGES_V2,
    LANGUAGES_V3,
    Call,
    model_text,
    nothing_to_say,
    plan_call,
)
from pipeline.engines.cosyvoice_prompts import prompt_text as model_prompt_text
from pipeline.engines.cosyvoice_runtime import (
    attend_to_whole_history,
    guard_model,
    quiet_progress,
    use_soundfile_loader,
)
from pipeline.engines.cosyvoice_setup import (
    device_plan,
    import_cosyvoice,
    inspect_model_dir,
    model_class,
)
from pipeline.engines.cosyvoice_speakers import PROFILE_TENSORS, SpeakerSlots, speaker_id
from pipeline.engines.device import DevicePlan, translate_oom
from pipeline.engines.options import EngineOptions
from pipeline.text import detect
from topics.errors import ErrorCode, VoiceFactoryError

log = logging.getLogger(__name__)

MAX_REFERENCE_S = 30.0  # CosyVoice's speech tokenizer refuses longer prompts
SPEAKER_SLOTS = 256  # voices kept in the model's speaker cache (a few hundred KiB each)
PAUSE_S = 0.2  # what a sentence of punctuation only becomes

__all__ = ["PROFILE_TENSORS", "CosyVoiceEngine", "speaker_id"]


@contextlib.contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    try:
        yield
    except VoiceFactoryError:
        raise
    except Exception as exc:
        translated = translate_oom(exc)
        if translated is not exc:
            raise translated from exc
        raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                f"CosyVoice failed {what}: {type(exc).__name__}: {exc}",
                                retryable=True) from exc


class CosyVoiceEngine:
    name = "cosyvoice"

    def __init__(self, *, model_dir: str, device: str = "auto", precision: str = "fp16",
                 empty_cache: bool = False, speaker_slots: int = SPEAKER_SLOTS,
                 source: str = "") -> None:
        self._model_dir = model_dir
        self._source = source
        self._device = device
        self._precision = precision
        self._empty_cache = empty_cache
        self._speaker_slots = speaker_slots
        self._model: Any = None
        self._plan: DevicePlan | None = None
        self._generation = 0
        self._sample_rate = 0
        self._slots: SpeakerSlots | None = None
        self._wav_prompts = True  # frontends since mid-2025 take a file, older ones a tensor
        self._batch_llm = False  # a batch's texts share LLM steps (cosyvoice_batch)

    @classmethod
    def from_options(cls, options: EngineOptions) -> CosyVoiceEngine:
        return cls(model_dir=options.cosyvoice_model_dir, device=options.device,
                   precision=options.precision, empty_cache=options.empty_cache,
                   source=options.cosyvoice_source)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            languages=LANGUAGES_V3 if self._generation >= 3 else LANGUAGES_V2,
            modes=("zero_shot", "cross_lingual", "instruct"),
            batching=self._batch_llm,  # a batch's texts share the LLM's steps once loaded
            streaming=True,  # synthesize_stream
            cloning="timbre + prosody from a 3-s reference (zero-shot speaker prompt)")

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def sample_rate(self) -> int:
        return self._sample_rate

    # -- start-up -------------------------------------------------------------------------

    def load(self) -> None:
        layout = inspect_model_dir(self._model_dir)
        module = import_cosyvoice(self._source)
        cls = model_class(module, layout)
        plan = device_plan(self._device, self._precision, empty_cache=self._empty_cache)
        log.info("loading %s from %s (%s, %s)", layout.class_name, layout.path, plan.device,
                 plan.precision)
        # Upstream calls the deprecated torch.cuda.amp.autocast on every call.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"cosyvoice\.")
        try:
            # Only keyword arguments both generations take: CosyVoice3 has no load_jit.
            with warnings.catch_warnings():  # deprecations in upstream's dependencies
                warnings.simplefilter("ignore", FutureWarning)
                model = cls(str(layout.path), fp16=plan.precision == "fp16")
        except Exception as exc:
            raise EngineUnavailable(f"CosyVoice failed to load {layout.path}: "
                                    f"{type(exc).__name__}: {exc}") from exc
        frontend = model.frontend
        if not callable(getattr(frontend, "_extract_text_token", None)):
            raise EngineUnavailable(f"{layout.class_name}.frontend has no _extract_text_token; "
                                    "this CosyVoice version is not supported")
        try:
            guard_model(model)
            attend_to_whole_history(model)
        except (AttributeError, TypeError) as exc:
            raise EngineUnavailable(f"{layout.class_name}.model: {exc}; this CosyVoice "
                                    "version is not supported") from exc
        frontend_module = importlib.import_module(type(frontend).__module__)
        if hasattr(frontend_module, "load_wav"):
            use_soundfile_loader(frontend_module)
        quiet_progress(module)
        if getattr(frontend, "text_frontend", None) == "":  # upstream's bare except left none
            log.warning("CosyVoice has no text normaliser (ttsfrd or wetext 0.1.8 importable): "
                        "reference transcripts are used as written")
        params = list(inspect.signature(model.add_zero_shot_spk).parameters)
        self._wav_prompts = "prompt_speech_16k" not in params
        self._model, self._plan = model, plan
        self._generation, self._sample_rate = layout.generation, int(model.sample_rate)
        self._slots = SpeakerSlots(frontend.spk2info, self._speaker_slots)
        llm = getattr(model.model, "llm", None)
        self._batch_llm = batchable(llm)
        if not self._batch_llm:
            log.info("%s's LLM (%s) is not batched here: a batch's items run one by one",
                     layout.class_name, type(llm).__name__)

    def _loaded(self) -> tuple[Any, DevicePlan, SpeakerSlots]:
        if self._model is None or self._plan is None or self._slots is None:
            raise RuntimeError("CosyVoiceEngine.load() must run before profile/synthesize")
        return self._model, self._plan, self._slots

    @contextlib.contextmanager
    def _running(self, plan: DevicePlan) -> Iterator[None]:
        # No autocast of ours: upstream's fp16 switch autocasts the LLM (in its own thread,
        # which a caller's autocast never reaches) and the flow, and keeps HiFT in fp32.
        with plan.inference(autocast=False):
            yield

    # -- voices ---------------------------------------------------------------------------

    def profile(self, *, voice_id: str, sha256: str, reference: Audio,
                prompt_text: str | None, measures: VoiceMeasures) -> Profile:
        model, plan, slots = self._loaded()
        if reference.duration_s > MAX_REFERENCE_S:
            raise VoiceFactoryError(ErrorCode.REFERENCE_INVALID,
                                    f"reference too long for CosyVoice: "
                                    f"{reference.duration_s:.1f} s, its speech tokenizer takes "
                                    f"<= {MAX_REFERENCE_S:.0f} s", retryable=False)
        transcript = self._normalised_transcript(model, (prompt_text or "").strip())
        spk_id = speaker_id(voice_id, sha256)
        try:
            with _engine_errors(f"computing the profile of voice {voice_id!r}"), \
                    self._running(plan):
                with self._prompt_speech(reference) as speech:
                    model.add_zero_shot_spk(model_prompt_text(transcript, self._generation),
                                            speech, spk_id)
                entry = model.frontend.spk2info[spk_id]
        finally:
            plan.after_batch()
        slots.adopt(spk_id)
        missing = [k for k in PROFILE_TENSORS if k not in entry]
        if missing:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "CosyVoice's add_zero_shot_spk "
                                    f"returned no {', '.join(missing)}", retryable=False)
        return Profile(
            voice_id=voice_id, sha256=sha256, engine=self.name,
            features={"cosyvoice_generation": float(self._generation),
                      "sample_rate": float(self._sample_rate)},
            tensors={key: _to_numpy(entry[key]) for key in PROFILE_TENSORS},
            text={"prompt_text": (prompt_text or "").strip(),
                  "language": detect(transcript) if transcript else ""})

    @staticmethod
    def _normalised_transcript(model: Any, transcript: str) -> str:
        """The transcript as inference_zero_shot normalises a prompt text it is given; as
        written where upstream's normaliser cannot read it."""
        if not transcript:
            return transcript
        try:
            normalised = model.frontend.text_normalize(transcript, split=False)
        except Exception as exc:
            log.warning("CosyVoice's text normaliser failed on a reference transcript "
                        "(%s: %s); using it as written", type(exc).__name__, exc)
            return transcript
        return "".join(normalised) if isinstance(normalised, list) else str(normalised)

    @contextlib.contextmanager
    def _prompt_speech(self, reference: Audio) -> Iterator[Any]:
        """The reference as this CosyVoice version's frontend reads it."""
        if not self._wav_prompts:
            import torch

            from pipeline.encode import resample

            yield torch.tensor(resample(reference, 16000).samples).unsqueeze(0)
            return
        fd, path = tempfile.mkstemp(prefix="vf-reference-", suffix=".wav")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(encode_wav(reference))
            yield path
        finally:
            os.unlink(path)

    # -- synthesis ------------------------------------------------------------------------

    def synthesize(self, profile: Profile, batch: list[SynthesisItem]) -> list[Synthesized]:
        return self.synthesize_voices([(profile, item) for item in batch])

    def synthesize_voices(self, batch: list[tuple[Profile, SynthesisItem]]
                          ) -> list[Synthesized]:
        """Items of any voices in one call (a `VoiceMixer`): each voice's speaker entry held
        for the call, the texts through the LLM together whatever their voice."""
        model, plan, slots = self._loaded()
        voices: dict[str, Profile] = {}
        for profile, _ in batch:
            self._check_profile(profile)
            voices.setdefault(_speaker(profile), profile)
        try:
            with contextlib.ExitStack() as held:
                for spk_id, profile in voices.items():
                    held.enter_context(slots.using(
                        spk_id, functools.partial(self._on_device, profile.tensors)))
                if len(batch) > 1 and self._batch_llm:
                    return self._batched(model, plan, batch)
                return [self._one(model, plan, profile, _speaker(profile), item)
                        for profile, item in batch]
        finally:
            plan.after_batch()

    def synthesize_stream(self, profile: Profile, item: SynthesisItem) -> AudioStream:
        """One item through upstream's stream=True path: mono float32 `Audio` at
        `sample_rate`, in order, as upstream yields it. Close the iterator (or run it out)
        to release the voice's speaker slot. Thread-safe: each call has its own streaming
        state (cosyvoice_runtime). Upstream changes speed only for whole clips, so an item
        at another speed than 1.0 is synthesized whole: one chunk."""
        model, plan, slots = self._loaded()
        self._check_profile(profile)
        if item.speed != 1.0:
            yield self.synthesize(profile, [item])[0].audio
            return
        call = self._plan_call(profile, item)
        rate = self._sample_rate
        if nothing_to_say(model_text(item.text, self._generation)):
            yield Audio(samples=_silence(rate), sample_rate=rate)
            return
        spk_id = _speaker(profile)
        what = f"streaming a {call.mode} item of voice {profile.voice_id!r}"
        try:
            with slots.using(spk_id, lambda: self._on_device(profile.tensors)):
                chunks = self._chunks(model, profile, spk_id, call, stream=True, speed=1.0)
                try:
                    while True:
                        with _engine_errors(what), self._running(plan):
                            chunk = next(chunks, None)
                        if chunk is None:
                            return
                        yield Audio(samples=_chunk_samples(chunk), sample_rate=rate)
                finally:
                    chunks.close()
        finally:
            plan.after_batch()

    def _check_profile(self, profile: Profile) -> None:
        generation = int(profile.features.get("cosyvoice_generation", 0))
        if profile.engine != self.name or generation != self._generation:
            raise VoiceFactoryError(
                ErrorCode.ENGINE_ERROR,
                f"profile of voice {profile.voice_id!r} was made by {profile.engine} "
                f"generation {generation}, this worker runs CosyVoice {self._generation}; "
                "delete the stored profile so it is recomputed", retryable=False)
        missing = [k for k in PROFILE_TENSORS if k not in profile.tensors]
        if missing:
            raise VoiceFactoryError(ErrorCode.ENGINE_ERROR,
                                    f"profile of voice {profile.voice_id!r} lacks "
                                    f"{', '.join(missing)}", retryable=False)

    def _on_device(self, tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
        import torch

        device = getattr(self._model.frontend, "device", "cpu")
        # torch.tensor copies: arrays loaded from safetensors may be read-only.
        return {key: torch.tensor(tensors[key]).to(device) for key in PROFILE_TENSORS}

    def _plan_call(self, profile: Profile, item: SynthesisItem) -> Call:
        return plan_call(item, voice_language=profile.text.get("language", ""),
                         has_transcript=bool(profile.text.get("prompt_text")),
                         generation=self._generation)

    def _one(self, model: Any, plan: DevicePlan, profile: Profile, spk_id: str,
             item: SynthesisItem) -> Synthesized:
        call = self._plan_call(profile, item)
        if nothing_to_say(model_text(item.text, self._generation)):
            # Upstream drops such a sentence and returns no audio: a pause, not an error.
            return Synthesized(audio=Audio(samples=_silence(self._sample_rate),
                                           sample_rate=self._sample_rate),
                               language=call.language)
        with _engine_errors(f"on a {call.mode} item of voice {profile.voice_id!r}"), \
                self._running(plan):
            samples = _concatenate(self._chunks(model, profile, spk_id, call, stream=False,
                                                speed=item.speed))
        return Synthesized(audio=Audio(samples=samples, sample_rate=self._sample_rate),
                           language=call.language)

    def _batched(self, model: Any, plan: DevicePlan,
                 batch: list[tuple[Profile, SynthesisItem]]) -> list[Synthesized]:
        """The batch's texts through the LLM together (cosyvoice_batch), then each to audio.
        A text of punctuation only is a pause here too, never a model row."""
        calls = [self._plan_call(profile, item) for profile, item in batch]
        rate = self._sample_rate
        spoken = [i for i, (_, item) in enumerate(batch)
                  if not nothing_to_say(model_text(item.text, self._generation))]
        samples = {i: _silence(rate) for i in range(len(batch)) if i not in spoken}
        names = sorted({profile.voice_id for profile, _ in batch})
        whose = f"voice {names[0]!r}" if len(names) == 1 else \
            "voices " + ", ".join(repr(n) for n in names)
        with _engine_errors(f"on a batch of {len(spoken)} items of {whose}"), \
                self._running(plan):
            inputs = [self._model_input(model, _speaker(batch[i][0]), calls[i])
                      for i in spoken]
            audio = batched_speech(model.model, inputs, [batch[i][1].speed for i in spoken])
        for i, clip in zip(spoken, audio, strict=True):
            samples[i] = _concatenate([{"tts_speech": clip}])
        return [Synthesized(audio=Audio(samples=samples[i], sample_rate=rate),
                            language=call.language) for i, call in enumerate(calls)]

    @staticmethod
    def _model_input(model: Any, spk_id: str, call: Call) -> dict[str, Any]:
        """What upstream's inference_* hands model.tts for this call, from the frontend's
        own functions (the text as given: text_frontend=False splits nothing)."""
        frontend, rate = model.frontend, model.sample_rate
        if call.mode == "zero_shot":
            return dict(frontend.frontend_zero_shot(call.text, "", "", rate, spk_id))
        if call.mode == "cross_lingual":
            return dict(frontend.frontend_cross_lingual(call.text, "", rate, spk_id))
        model_input = dict(frontend.frontend_instruct2(call.text, call.instruction, "", rate,
                                                       spk_id))
        # The speaker entry's prompt text is the transcript: the instruction replaces it, as
        # _instruct's per-call entry does for the one-text path.
        model_input["prompt_text"], model_input["prompt_text_len"] = \
            frontend._extract_text_token(call.instruction)
        return model_input

    def _chunks(self, model: Any, profile: Profile, spk_id: str, call: Call, *,
                stream: bool, speed: float) -> Generator[Mapping[str, Any], None, None]:
        """Upstream's chunks for one call. text_frontend=False throughout: the text comes
        from our front-end, normalised and split, and upstream's normaliser breaks
        pronunciation annotations."""
        options = {"stream": stream, "speed": speed, "text_frontend": False}
        if call.mode == "zero_shot":
            transcript = model_prompt_text(profile.text["prompt_text"], self._generation)
            yield from model.inference_zero_shot(call.text, transcript, "",
                                                 zero_shot_spk_id=spk_id, **options)
        elif call.mode == "cross_lingual":
            yield from model.inference_cross_lingual(call.text, "", zero_shot_spk_id=spk_id,
                                                     **options)
        else:
            yield from self._instruct(model, spk_id, call, options)

    def _instruct(self, model: Any, spk_id: str, call: Call,
                  options: dict[str, Any]) -> Generator[Mapping[str, Any], None, None]:
        # A per-call speaker entry: the voice's prompt speech, the instruction as prompt
        # text (what instruct2 computes itself when it is given a wav instead of an id).
        table = model.frontend.spk2info
        entry = dict(table[spk_id])
        entry["prompt_text"], entry["prompt_text_len"] = \
            model.frontend._extract_text_token(call.instruction)
        call_id = f"{spk_id}:instruct:{uuid.uuid4().hex[:12]}"
        table[call_id] = entry
        try:
            yield from model.inference_instruct2(call.text, call.instruction, "",
                                                 zero_shot_spk_id=call_id, **options)
        finally:
            table.pop(call_id, None)


def _speaker(profile: Profile) -> str:
    return speaker_id(profile.voice_id, profile.sha256)


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value)


def _silence(rate: int) -> Samples:
    return np.zeros(int(PAUSE_S * rate), np.float32)


def _chunk_samples(chunk: Mapping[str, Any]) -> Samples:
    samples: Samples = np.clip(_to_numpy(chunk["tts_speech"]).astype(np.float32).reshape(-1),
                               -1.0, 1.0)
    return samples


def _concatenate(chunks: Iterable[Mapping[str, Any]]) -> Samples:
    pieces = [_chunk_samples(chunk) for chunk in chunks]
    if not pieces or not sum(len(p) for p in pieces):
        raise VoiceFactoryError(ErrorCode.ENGINE_ERROR, "CosyVoice returned no audio",
                                retryable=True)
    samples: Samples = np.concatenate(pieces)
    return samples
