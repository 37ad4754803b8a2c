"""Counting usage exactly once per request: the ledger's entries and the totals they make.

    a result on tts.results[p] -> `entry_for(result)`: succeeded with audio? tenant (absent:
      default), UTC month of completed_at, audio_s = audio.duration_s, engine_s = rtf x
      duration_s (None where the result carries no rtf)
    -> `ledger_key(p, tenant, request_id)` = b"p|tenant/request_id" (scoped_id)
    -> `merge_entry(ledger[key], entry)`: the first success is the request's entry; a copy
       (a kill -9 redelivery, a retried attempt, a replayed result) changes nothing, except
       that engine seconds missing from the first copy are taken from a later one
    -> ledger[key] = entry (faust table, changelog) and `Totals.apply(p, old, new)`

Why a ledger of requests rather than counters: a counter and a "seen" mark are two changelog
records, and a crash between them counts twice or never. A ledger entry is both at once
(its key is the mark, its value the amount), and setting it is idempotent, so a replayed
result after a crash finds its entry and adds nothing. The totals are a pure function of the
ledger: recomputed from it after every recovery (`Totals.rebuild`), kept up to date in
between by `apply`.

All copies of one request's result share its Kafka key (job ID or request ID), so they land
on one partition, whose owner sees them all: the partition in the ledger key names the
changelog partition the entry is written to (`LedgerTable` in metering.py).

Engine seconds: a batch's results carry the batch's engine time in `timings_ms.synthesis`,
the same number on every request of the batch, and `rtf` = that time / the batch's audio
seconds; `rtf x duration_s` is the request's share of the batch's engine time in proportion
to its audio, so a batch's requests add up to the batch's engine time, not N times it. A
result answered from an already stored object (a redelivery) carries no rtf: no engine ran.

Entries are dropped (`expired`) once their month is over by the horizon after which no copy
of a result can come any more (tts.results' retention and a day); the last report published
for that month stays in the store as its final word. Pure: no Kafka, no store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import msgspec

from pipeline.usage import month_of, next_month_start
from topics.events import SynthesisResult
from topics.tenancy import check_tenant, scoped_id, tenant_of
from topics.validation import REQUEST_ID_MAX, check_id

log = logging.getLogger(__name__)

MAX_AUDIO_S = 3600.0  # one line of <= 2,000 characters: minutes of speech at most
MAX_RTF = 1000.0  # beyond this the number is a bug, not a slow engine


class Entry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One request's usage, as the ledger keeps it."""

    tenant: str
    month: str  # YYYY-MM, UTC, of the first counted result's completed_at
    audio_s: float
    engine_s: float | None = None


# What a result did to usage (vf_usage_results_total): counted: a new request; engine_added:
# a copy brought the engine seconds its first copy lacked; duplicate: already counted;
# not_counted: not a success with audio; invalid: an unusable tenant, ID or duration.
UsageOutcome = Literal["counted", "engine_added", "duplicate", "not_counted", "invalid"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Entry)


def encode_entry(entry: Entry) -> bytes:
    return _encoder.encode(entry)


def decode_entry(raw: bytes) -> Entry:
    return _decoder.decode(raw)


def ledger_key(partition: int, tenant: str, request_id: str) -> bytes:
    """`p|tenant/request_id` (`p|request_id` for default): '|' and '/' are outside the ID
    charset, so the parts never run into each other."""
    return f"{partition}|{scoped_id(tenant, request_id)}".encode()


def key_partition(key: bytes) -> int:
    """The tts.results partition a ledger key was counted on; ValueError if none."""
    head, sep, _ = key.partition(b"|")
    if not sep or not head.isdigit():
        raise ValueError(f"not a usage ledger key: {key[:80]!r}")
    return int(head)


def result_month(completed_at: str, now: datetime) -> str:
    """The UTC month of a result's completed_at; the aggregator's clock when unreadable
    (counted late rather than not at all)."""
    try:
        return month_of(datetime.fromisoformat(completed_at))
    except ValueError:
        log.warning("completed_at %r is not RFC 3339; counted in the current month",
                    completed_at[:40])
        return month_of(now)


def entry_for(result: SynthesisResult, now: datetime) -> tuple[Entry | None, UsageOutcome]:
    """The entry a result makes, or None with the reason it counts nothing."""
    audio = result.audio
    if result.status != "succeeded" or audio is None:
        return None, "not_counted"
    ctx = {"request_id": result.request_id, "voice_id": result.voice_id}
    try:
        tenant = check_tenant(tenant_of(result.tenant))
        check_id("request_id", result.request_id, REQUEST_ID_MAX)
    except ValueError as exc:
        log.warning("result not counted in usage: %s", exc, extra=ctx)
        return None, "invalid"
    if not 0.0 <= audio.duration_s <= MAX_AUDIO_S:  # NaN fails too
        log.warning("result not counted in usage: audio of %r s", audio.duration_s, extra=ctx)
        return None, "invalid"
    engine_s = None
    rtf = result.rtf
    if rtf is not None and 0.0 <= rtf <= MAX_RTF:
        engine_s = round(rtf * audio.duration_s, 6)
    elif rtf is not None:
        log.warning("rtf %r of a result is not usable; its engine seconds are not counted",
                    rtf, extra=ctx)
    return Entry(tenant=tenant, month=result_month(result.completed_at, now),
                 audio_s=round(audio.duration_s, 6), engine_s=engine_s), "counted"


def merge_entry(old: Entry | None, new: Entry) -> tuple[Entry | None, UsageOutcome]:
    """What the ledger holds after `new` arrives for a request holding `old`; None: keep
    `old` unchanged. The first success fixes the month and the audio seconds."""
    if old is None:
        return new, "counted"
    if old.engine_s is None and new.engine_s is not None:
        return msgspec.structs.replace(old, engine_s=new.engine_s), "engine_added"
    return None, "duplicate"


def expired(month: str, now: datetime, horizon_s: float) -> bool:
    """Whether a month's entries may go: over for longer than any copy can arrive late."""
    return (now - next_month_start(month)).total_seconds() > horizon_s


@dataclass
class Sums:
    audio_s: float = 0.0
    engine_s: float = 0.0
    requests: int = 0

    def rounded(self) -> tuple[float, float, int]:
        return round(self.audio_s, 3), round(self.engine_s, 3), self.requests


Bucket = tuple[int, str, str]  # (partition, tenant, month)


class Totals:
    """Sums per (partition, tenant, month), derived from the ledger."""

    def __init__(self) -> None:
        self.buckets: dict[Bucket, Sums] = {}

    def apply(self, partition: int, old: Entry | None, new: Entry | None) -> None:
        """The ledger entry of a request on `partition` went from `old` to `new` (None:
        absent)."""
        if old is not None:
            self._add(partition, old, -1)
        if new is not None:
            self._add(partition, new, +1)

    def _add(self, partition: int, entry: Entry, sign: int) -> None:
        bucket = (partition, entry.tenant, entry.month)
        sums = self.buckets.setdefault(bucket, Sums())
        sums.audio_s += sign * entry.audio_s
        sums.engine_s += sign * (entry.engine_s or 0.0)
        sums.requests += sign
        if sums.requests <= 0:
            del self.buckets[bucket]  # nothing left: no float residue kept as usage

    def rebuild(self, ledger: Iterable[tuple[bytes, bytes]]) -> int:
        """Recompute every sum from the ledger's raw items; returns the entries read (an
        unreadable one is skipped with a warning, as the agent would never have written
        it)."""
        self.buckets = {}
        count = 0
        for key, raw in ledger:
            try:
                self._add(key_partition(key), decode_entry(raw), +1)
            except ValueError as exc:  # msgspec's DecodeError is one
                log.warning("usage ledger entry %r skipped: %s", key[:80], exc)
                continue
            count += 1
        return count

