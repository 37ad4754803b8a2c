"""The usage meter's wiring and publisher, without a broker: the ledger's changelog
partitions, and which reports reach the store (a dict here; tests/integration/test_usage.py
runs the same over the real stack)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from consumers.aggregator.app import JobAggregator, app_id
from consumers.aggregator.usage import Entry
from consumers.settings import AggregatorSettings, KafkaSettings, Settings
from pipeline.storage import ObjectStore
from pipeline.usage import decode_report, read_usage, report_source
from tests.unit.consumers.gateway.memorystore import MemoryStore

NOW = datetime(2031, 3, 15, 12, 0, tzinfo=UTC)


def _meter(tmp_path: Path, store: MemoryStore) -> JobAggregator:
    settings = Settings(kafka=KafkaSettings(topic_prefix="acme."),
                        aggregator=AggregatorSettings(port=-1))
    fake: ObjectStore = store  # type: ignore[assignment]  # the calls the meter makes
    return JobAggregator(settings, store=fake, datadir=tmp_path)


def test_the_ledger_is_a_changelogged_table_whose_keys_name_their_partition(
        tmp_path: Path) -> None:
    agg = _meter(tmp_path, MemoryStore())
    table = agg.usage.table
    assert table.changelog_topic.get_topic_name() == "acme.vf-aggregator-usage-changelog"
    assert table.partitions == 12 and not table.use_partitioner
    # written outside the agent (expiry in the timer): the key alone says where
    assert table.partition_for_key(b"7|acme/r1") == 7


async def test_reports_go_out_for_owned_partitions_only_and_again_only_when_changed(
        tmp_path: Path) -> None:
    store = MemoryStore()
    usage = _meter(tmp_path, store).usage
    a = Entry(tenant="acme", month="2031-03", audio_s=2.5, engine_s=0.5)
    usage.totals.apply(1, None, a)
    usage.totals.apply(2, None, a)
    usage.totals.apply(5, None, Entry(tenant="default", month="2031-03", audio_s=1.0))
    assert await usage.publish({1, 2}, NOW) == 2
    assert sorted(store.objects) == ["tenants/acme/usage/2031-03/acme.vf-aggregator/p001.json",
                                     "tenants/acme/usage/2031-03/acme.vf-aggregator/p002.json"]
    report = decode_report(store.objects["tenants/acme/usage/2031-03/acme.vf-aggregator/p001.json"])
    assert (report.tenant, report.partition, report.audio_s, report.engine_s,
            report.requests) == ("acme", 1, 2.5, 0.5, 1)
    assert report.updated_at == "2031-03-15T12:00:00.000Z"
    assert await usage.publish({1, 2}, NOW) == 0  # nothing changed
    usage.totals.apply(2, None, Entry(tenant="acme", month="2031-03", audio_s=1.0,
                                      engine_s=0.25))
    assert await usage.publish({1, 2}, NOW) == 1
    total = read_usage(store, "acme", "2031-03", "acme.vf-aggregator")  # type: ignore[arg-type]
    assert (total.audio_s, total.engine_s, total.requests, total.partitions) == \
        (6.0, 1.25, 3, 2)


async def test_a_store_failure_leaves_the_reports_due(tmp_path: Path) -> None:
    class Failing(MemoryStore):
        fail = True

        def put(self, key: str, data: bytes, content_type: str,
                metadata: dict[str, str] | None = None) -> None:
            if self.fail:
                raise OSError("store down")
            super().put(key, data, content_type, metadata)

    store = Failing()
    usage = _meter(tmp_path, store).usage
    usage.totals.apply(0, None, Entry(tenant="acme", month="2031-03", audio_s=1.0))
    assert await usage.publish({0}, NOW) == 0 and store.objects == {}
    store.fail = False
    assert await usage.publish({0}, NOW) == 1
    assert list(store.objects) == ["tenants/acme/usage/2031-03/acme.vf-aggregator/p000.json"]


def test_readers_sum_the_reports_their_own_aggregator_group_writes() -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="acme."))
    assert report_source(settings.kafka.topic_prefix) == app_id(settings)
