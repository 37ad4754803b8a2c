"""Usage metering inside the aggregator: the ledger table, its totals, and their reports.

    agent (app.py), every tts.results record of partition p:
      `UsageMeter.count(result, p)` -> usage.entry_for -> usage.merge_entry
        -> table["usage"][b"p|tenant/request_id"] = entry   (changelog partition p)
        -> Totals.apply
    timer, every VF_USAGE_PUBLISH_S (not while rebalancing or recovering):
      after an assignment: Totals.rebuild from the table (recovery fills it behind our back)
      -> drop entries of months past the horizon (tombstones on the changelog)
      -> for each owned partition's (tenant, month) whose sums changed, or every
         REPUBLISH_S regardless: pipeline.usage.UsageReport -> the store
         ({tenant root}usage/{month}/{app ID}/p{ppp}.json, pipeline.keys.usage_key)

The table is faust's memory store with a compacted changelog, like the jobs table: a
restarted or new owner rebuilds the ledger from it, so what was counted before a crash is
neither lost nor counted again (usage.py says why a ledger and not counters).

`LedgerTable` writes each entry to the changelog partition its key names (the tts.results
partition it was counted on), also from the timer, which has no current event: then the
partition that recovers an entry is the partition whose results it deduplicates.

Publishing only owned partitions keeps one writer per report; a report the previous owner
wrote just before losing its partition is overwritten by the new owner's first publish after
its rebuild, and every REPUBLISH_S after that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import faust

from consumers.aggregator.usage import (
    Bucket,
    Totals,
    UsageOutcome,
    decode_entry,
    encode_entry,
    entry_for,
    expired,
    key_partition,
    ledger_key,
    merge_entry,
)
from pipeline.keys import usage_key
from pipeline.storage import ObjectStore
from pipeline.usage import UsageReport, encode_report
from topics.events import SynthesisResult

log = logging.getLogger(__name__)

TABLE = "usage"
REPUBLISH_S = 60.0  # unchanged reports are written again this often (heals a stale write)


class LedgerTable(faust.Table[bytes, bytes]):
    """A table whose keys name their changelog partition (`p|...`), so entries can be
    written and deleted outside the agent's current event."""

    def partition_for_key(self, key: Any) -> int | None:
        return key_partition(key)


class UsageMeter:
    """The ledger, its totals and the publisher; `count` is called by the agent."""

    def __init__(self, app: faust.App, *, store: ObjectStore, partitions: int,
                 results_topic: str, source: str, publish_s: float, horizon_s: float,
                 on_outcome: Callable[[UsageOutcome], None] | None = None) -> None:
        self._app = app
        self._store = store
        self._results_topic = results_topic
        self._source = source
        self._horizon_s = horizon_s
        self._on_outcome = on_outcome
        self.table = LedgerTable(app, name=TABLE, default=None, key_type=bytes,
                                 value_type=bytes, partitions=partitions,
                                 beacon=app.tables.beacon,
                                 help="usage ledger: one entry per counted request")
        app.tables.add(self.table)
        self.totals = Totals()
        self._stale = True  # rebuild before the next publish (start, every assignment)
        self._published: dict[Bucket, tuple[tuple[float, float, int], float]] = {}
        self.reports_written = 0
        app.timer(publish_s, name="publish_usage")(self.tick)

    def count(self, result: SynthesisResult, partition: int) -> UsageOutcome:
        """Count one result read from tts.results[partition] (sync: no await between the
        ledger's read and its write, so the agent and the timer never interleave here)."""
        entry, outcome = entry_for(result, datetime.now(UTC))
        if entry is not None:
            key = ledger_key(partition, entry.tenant, result.request_id)
            raw = self.table.get(key)
            old = decode_entry(raw) if raw else None
            merged, outcome = merge_entry(old, entry)
            if merged is not None:
                self.table[key] = encode_entry(merged)
                self.totals.apply(partition, old, merged)
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        return outcome

    def on_assigned(self) -> None:
        """Recovery is about to refill the table: recompute the totals after it."""
        self._stale = True

    async def tick(self) -> None:
        if self._app.rebalancing or self._app.in_recovery:
            return
        owned = {tp.partition for tp in self._app.consumer.assignment()
                 if tp.topic == self._results_topic}
        now = datetime.now(UTC)
        if self._stale:
            entries = self.totals.rebuild(list(self.table.data.items()))
            self._stale = False
            self._published.clear()  # a new owner writes every report it holds once
            log.info("usage ledger: %d entries, %d partition-tenant-months", entries,
                     len(self.totals.buckets))
        self._expire(owned, now)
        await self.publish(owned, now)

    def _expire(self, owned: set[int], now: datetime) -> None:
        """Delete the owned entries of months past the horizon (and their totals)."""
        months = {m for (p, _, m) in self.totals.buckets if p in owned
                  if expired(m, now, self._horizon_s)}
        if not months:
            return
        dropped = 0
        for key, raw in list(self.table.data.items()):
            try:
                partition, entry = key_partition(key), decode_entry(raw)
            except ValueError:
                continue
            if partition in owned and entry.month in months:
                del self.table[key]
                self.totals.apply(partition, entry, None)
                dropped += 1
        log.info("usage ledger: %d entries of %s dropped (their last reports stay)", dropped,
                 ", ".join(sorted(months)))

    async def publish(self, owned: set[int], now: datetime) -> int:
        """Write the reports of owned partitions that changed (or are due again); returns
        how many were written. A store failure leaves them due for the next tick."""
        mono = time.monotonic()
        due: list[tuple[Bucket, tuple[float, float, int]]] = []
        for bucket, sums in self.totals.buckets.items():
            if bucket[0] not in owned:
                continue  # another instance's partition (the memory store keeps old keys)
            numbers = sums.rounded()
            last = self._published.get(bucket)
            if last is None or last[0] != numbers or mono - last[1] >= REPUBLISH_S:
                due.append((bucket, numbers))
        if not due:
            return 0
        stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        try:
            await asyncio.to_thread(self._write, due, stamp)
        except Exception as exc:
            log.warning("usage reports not written (%d due): %s; retrying next tick",
                        len(due), exc)
            return 0
        for bucket, numbers in due:
            self._published[bucket] = (numbers, mono)
        self.reports_written += len(due)
        return len(due)

    def _write(self, due: list[tuple[Bucket, tuple[float, float, int]]], stamp: str) -> None:
        for (partition, tenant, month), (audio_s, engine_s, requests) in due:
            report = UsageReport(tenant=tenant, month=month, partition=partition,
                                 audio_s=audio_s, engine_s=engine_s, requests=requests,
                                 updated_at=stamp)
            key = usage_key(month, self._source, partition, tenant=tenant)
            self._store.put(key, encode_report(report), "application/json")

