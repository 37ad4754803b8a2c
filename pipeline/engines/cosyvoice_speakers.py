"""The voices the CosyVoice adapter keeps in upstream's zero-shot speaker cache.

Profile.tensors (numpy, from safetensors) -> `SpeakerSlots.using(spk_id, build)` puts them in
the frontend's `spk2info` under `speaker_id(voice_id, sha256)` on first use -> upstream's
inference_* read them by that id (and copy the entry before changing it, since 3b44913) ->
least recently used voices leave when more than `capacity` are held, never one in use.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

# What frontend_zero_shot returns for a reference, less the per-call `text`/`text_len`.
PROFILE_TENSORS = ("prompt_text", "prompt_text_len", "llm_prompt_speech_token",
                   "llm_prompt_speech_token_len", "flow_prompt_speech_token",
                   "flow_prompt_speech_token_len", "prompt_speech_feat",
                   "prompt_speech_feat_len", "llm_embedding", "flow_embedding")


def speaker_id(voice_id: str, sha256: str) -> str:
    """The zero-shot speaker id of a (voice, reference): a new reference is a new speaker."""
    return f"vf:{voice_id}:{sha256[:16]}"


class SpeakerSlots:
    """Which voices sit in the model's speaker cache: least recently used goes first, never
    one that a call in another thread is using."""

    def __init__(self, table: dict[str, Any], capacity: int) -> None:
        self._table = table
        self._capacity = capacity
        self._recent: OrderedDict[str, int] = OrderedDict()  # id -> calls using it
        self._lock = threading.Lock()

    def adopt(self, spk_id: str) -> None:
        """Track an entry that add_zero_shot_spk put in the table."""
        with self._lock:
            self._recent[spk_id] = self._recent.get(spk_id, 0)
            self._recent.move_to_end(spk_id)
            self._evict()

    @contextlib.contextmanager
    def using(self, spk_id: str, build: Callable[[], dict[str, Any]]) -> Iterator[None]:
        with self._lock:
            if spk_id not in self._table:
                self._table[spk_id] = build()
            self._recent[spk_id] = self._recent.get(spk_id, 0) + 1
            self._recent.move_to_end(spk_id)
            self._evict()
        try:
            yield
        finally:
            with self._lock:
                if spk_id in self._recent:
                    self._recent[spk_id] -= 1

    def _evict(self) -> None:
        for spk_id in [k for k, users in self._recent.items() if users == 0]:
            if len(self._recent) <= self._capacity:
                break
            del self._recent[spk_id]
            self._table.pop(spk_id, None)
