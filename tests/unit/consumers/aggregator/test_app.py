"""The faust app's wiring, without a broker: names, table, partitions, credentials."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest

from consumers.aggregator import app as aggregator_app
from consumers.aggregator.app import JobAggregator, app_id, broker_credentials
from consumers.settings import AggregatorSettings, KafkaSettings, Secret, Settings, WorkerSettings
from consumers.wiring import make_store
from tests.unit.consumers.parts import FakePart

STORE = make_store(Settings().store)  # a client object only: nothing here talks to S3


def _web(port: int, host: str = "0.0.0.0") -> Settings:
    return Settings(aggregator=AggregatorSettings(port=port),
                    worker=WorkerSettings(metrics_host=host))


def test_the_app_its_group_and_its_changelog_carry_the_topic_prefix(tmp_path: Path) -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="acme."),
                        aggregator=AggregatorSettings(port=-1, job_timeout_seconds=8))
    agg = JobAggregator(settings, store=STORE, datadir=tmp_path / "faust")
    assert app_id(settings) == "acme.vf-aggregator"
    assert agg.app.conf.id == "acme.vf-aggregator"
    assert agg.table.changelog_topic.get_topic_name() == "acme.vf-aggregator-jobs-changelog"
    assert agg.results.get_topic_name() == "acme.tts.results"
    # co-partitioned with tts.results, so a job's state lives with its results
    assert agg.table.partitions == 12 and agg.table.use_partitioner
    assert Path(str(agg.app.conf.datadir)) == tmp_path / "faust"
    assert agg.app.conf.web_enabled is False
    assert [str(u) for u in agg.app.conf.broker] == ["kafka://127.0.0.1:9092"]


def test_a_static_aggregator_is_named_after_its_instance_and_an_empty_one_is_dynamic(
        tmp_path: Path) -> None:
    def member(instance_id: str) -> object:
        settings = Settings(aggregator=AggregatorSettings(port=-1),
                            worker=WorkerSettings(instance_id=instance_id))
        return JobAggregator(settings, store=STORE, datadir=tmp_path).app.conf \
            .consumer_group_instance_id

    assert member("vf-0") == "vf-0-aggregator"
    assert member("") is None  # not "-aggregator": VF_INSTANCE_ID empty means dynamic


def test_the_web_port_serves_health_and_metrics_when_enabled(tmp_path: Path) -> None:
    agg = JobAggregator(_web(19109, "127.0.0.1"), store=STORE, datadir=tmp_path)
    assert agg.app.conf.web_enabled and agg.app.conf.web_port == 19109
    assert set(agg.app.web.views) == {"/healthz", "/readyz", "/metrics"}


async def test_the_metrics_page_renders_this_aggregators_own_registry(tmp_path: Path) -> None:
    agg = JobAggregator(_web(19109, "127.0.0.1"), store=STORE, datadir=tmp_path)
    agg.metrics.on_result("late")
    other = JobAggregator(_web(19110), store=STORE, datadir=tmp_path / "other")
    response = await agg.app.web.views["/metrics"].get(None)  # the page ignores its request
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    body = response.body.decode()  # aiohttp Response: the exposition bytes
    assert 'vf_job_results_total{outcome="late"} 1.0' in body
    assert "# TYPE vf_jobs_open gauge" in body
    assert other.metrics.render()[0].count(b'outcome="late"} 0.0') == 1


def test_credentials_follow_the_security_protocol() -> None:
    assert broker_credentials(KafkaSettings()) is None
    sasl = broker_credentials(KafkaSettings(security_protocol="SASL_SSL",
                                            sasl_mechanism="SCRAM-SHA-512",
                                            sasl_username="u",
                                            sasl_password=Secret("p")))
    assert isinstance(sasl, faust.SASLCredentials)
    assert sasl.username == "u" and sasl.password == "p" and sasl.ssl_context is not None
    assert str(sasl.mechanism.value) == "SCRAM-SHA-512"
    assert isinstance(broker_credentials(KafkaSettings(security_protocol="SSL")),
                      faust.SSLCredentials)
    with pytest.raises(ValueError, match="VF_KAFKA_SECURITY_PROTOCOL 'KERBEROS'"):
        broker_credentials(KafkaSettings(security_protocol="KERBEROS"))
    # SASL without a mechanism: PLAIN, as aiokafka's clients get it from security_kwargs.
    plain = broker_credentials(KafkaSettings(security_protocol="SASL_PLAINTEXT",
                                             sasl_username="u", sasl_password=Secret("p")))
    assert isinstance(plain, faust.SASLCredentials)
    assert str(plain.mechanism.value) == "PLAIN" and plain.ssl_context is None


def test_the_datadir_defaults_to_the_state_dir(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path / "state"))
    agg = JobAggregator(Settings(aggregator=AggregatorSettings(port=-1)), store=STORE)
    assert Path(str(agg.app.conf.datadir)) == tmp_path / "state" / "aggregator"


async def test_an_emitter_that_fails_to_start_is_stopped_and_a_started_one_at_shutdown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tick retries a failed close, so an emitter whose producer started before its
    start failed (tts.jobs missing) must be stopped, or every tick leaks a producer."""
    events: list[str] = []
    made: list[FakePart] = []
    failures = [RuntimeError("topic tts.jobs has no partitions")]

    def emitter(**_: object) -> FakePart:
        made.append(FakePart(f"emitter{len(made)}", events,
                             fail=failures.pop() if failures else None))
        return made[-1]

    monkeypatch.setattr(aggregator_app, "JobEmitter", emitter)
    monkeypatch.setattr(aggregator_app, "make_producer", lambda *_, **__: None)
    agg = JobAggregator(Settings(aggregator=AggregatorSettings(port=-1)), store=STORE,
                        datadir=tmp_path)
    with pytest.raises(RuntimeError, match="no partitions"):
        await agg._ensure_emitter()
    assert events == ["start emitter0", "stop emitter0"]
    started = [id(await agg._ensure_emitter()) for _ in range(2)]
    assert started == [id(made[1])] * 2  # started once, then reused
    await agg._on_shutdown(agg.app, signal=None)
    assert events == ["start emitter0", "stop emitter0", "start emitter1", "stop emitter1"]
    await agg._on_shutdown(agg.app, signal=None)  # nothing left to stop
    assert len(events) == 4
