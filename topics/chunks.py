"""Audio chunk records on tts.audio (DESIGN.md, "Lanes"): binary PCM in the value, the rest
in headers, so a reader never base64-decodes JSON to play audio.

Worker: each engine chunk -> `chunk_headers(...)` + the PCM bytes -> tts.audio, key =
request_id. Reader (`say --stream`, the gateway): record -> `read_chunk` -> `AudioChunk`;
chunks of one attempt in `seq` order concatenate to the stored object's samples. A reader
tells a restarted stream (a redelivery after a worker died, or a retry) from a continuation
by `attempt`: a new attempt starts again at seq 0 and replaces what came before. The record
with `final` set ends an attempt; its `status` is the request's answer (`succeeded`, or
`failed`/`cancelled`/... with an empty value), so a reader never waits for tts.results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SEQ = "vf-seq"
ATTEMPT = "vf-attempt"
SAMPLE_RATE = "vf-sample-rate"
ENCODING = "vf-encoding"
FINAL = "vf-final"
STATUS = "vf-status"  # on the final record only
ERROR = "vf-error"  # on a final record whose status is not succeeded: the error code
# Set by a request's producer (the gateway) to have the chunks written to one partition of
# tts.audio that only it reads, instead of the partition the key hashes to.
REPLY_PARTITION = "vf-reply-partition"

PCM_S16LE = "pcm_s16le"  # little-endian signed 16-bit mono, the only encoding so far


@dataclass(frozen=True)
class AudioChunk:
    request_id: str
    seq: int
    attempt: str
    sample_rate: int
    encoding: str
    final: bool
    data: bytes
    status: str | None = None
    error: str | None = None


class InvalidChunk(ValueError):
    """A tts.audio record without the headers a chunk needs."""


def chunk_headers(*, seq: int, attempt: str, sample_rate: int, final: bool,
                  status: str | None = None, error: str | None = None,
                  encoding: str = PCM_S16LE) -> list[tuple[str, bytes]]:
    headers = [(SEQ, str(seq).encode()), (ATTEMPT, attempt.encode()),
               (SAMPLE_RATE, str(sample_rate).encode()), (ENCODING, encoding.encode()),
               (FINAL, b"1" if final else b"0")]
    if status is not None:
        headers.append((STATUS, status.encode()))
    if error is not None:
        headers.append((ERROR, error.encode()))
    return headers


def read_chunk(key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]]) -> AudioChunk:
    found = {name: raw.decode("utf-8", "replace") for name, raw in headers}
    missing = [h for h in (SEQ, ATTEMPT, SAMPLE_RATE, ENCODING, FINAL) if h not in found]
    if key is None or missing:
        raise InvalidChunk(f"not a chunk record: missing {', '.join(missing) or 'key'}")
    try:
        seq, rate = int(found[SEQ]), int(found[SAMPLE_RATE])
    except ValueError:
        raise InvalidChunk(f"{SEQ}/{SAMPLE_RATE} are not integers: {found[SEQ]!r}, "
                           f"{found[SAMPLE_RATE]!r}") from None
    return AudioChunk(request_id=key.decode("utf-8", "replace"), seq=seq,
                      attempt=found[ATTEMPT], sample_rate=rate, encoding=found[ENCODING],
                      final=found[FINAL] == "1", data=value or b"",
                      status=found.get(STATUS), error=found.get(ERROR))


def reply_partition(headers: Sequence[tuple[str, bytes]]) -> int | None:
    """The tts.audio partition a request's producer asked for, or None (hash the key)."""
    for name, raw in headers:
        if name == REPLY_PARTITION:
            try:
                value = int(raw)
            except ValueError:
                return None
            return value if value >= 0 else None
    return None
