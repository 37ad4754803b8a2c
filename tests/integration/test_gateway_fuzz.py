"""The gateway fuzzed from its own API description: schemathesis against /openapi.json.

The gateway runs in-process (`RunningGateway`) on the real Kafka and S3 server, with
`FakeStreamingWorker` answering speech requests; schemathesis' engine (the `st run` phases:
examples, coverage, fuzzing; positive and negative data) runs in a thread against it with a
valid key. Every check is on, and a response fails when it is

- a 5xx other than a documented 503 (`not_a_server_error`, `status_code_conformance`),
- not what the document says (status, content type, headers, body schema),
- an acceptance of data the document calls invalid, or a refusal of valid data other than
  the registry's 404/409 (`negative_data_rejection`, `positive_data_acceptance`).

A positive speech or job case names the registered voice half the time, so valid requests
do reach Kafka; afterwards every record the gateway produced is read back and must pass its
reader's own checks: both request lanes the worker's `decode_request`, tts.voices
`decode_voice` (or a tombstone) under its voice's key, tts.control `decode_control`.

VF_FUZZ_EXAMPLES (default 50) sets the cases per operation and phase, VF_FUZZ_SEED replays a
run; a longer hunt (docs/benchmarks.md, "Gateway fuzz"):
`VF_FUZZ_EXAMPLES=500 pytest tests/integration/test_gateway_fuzz.py -s -o timeout=3600`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import pkgutil
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hypothesis
import orjson
import pytest
import schemathesis
from aiokafka import TopicPartition
from minio import Minio
from schemathesis.core.failures import Failure
from schemathesis.engine import events
from schemathesis.openapi.checks import RejectedPositiveData

from consumers.clients.demo import REFERENCE_TEXT, make_reference
from consumers.gateway.keys import SCOPES, KeyRing, add_key
from consumers.gateway.openapi_paths import OPERATIONS
from consumers.kafka import make_consumer
from consumers.settings import GatewaySettings, Settings
from consumers.wiring import make_store
from deploy.local import stack
from pipeline.storage import ObjectStore
from pipeline.voices import register_voice
from tests.integration.gateway_harness import FakeStreamingWorker, RunningGateway
from topics.control import control_key, decode_control
from topics.events import decode_voice
from topics.specs import CONTROL, REQUESTS, REQUESTS_INTERACTIVE, VOICES
from topics.validation import decode_request


def import_all(package: Any) -> None:
    """Import every submodule of `package` here, on the main thread, at collection.

    The fuzz runs in a thread while the gateway serves on the event loop. schemathesis
    imports about 140 of its modules lazily during a run, and pytest rewrites the asserts
    of pytest plugins' packages (schemathesis's, hypothesis's) on import with ast.parse,
    whose conversion in CPython 3.11 is not safe while another thread parses too: one CI
    run died with SystemError "AST constructor recursion depth mismatch" inside
    schemathesis.openapi.from_url. Importing them all first leaves nothing to parse then.
    """
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        with contextlib.suppress(Exception):  # optional extras whose libraries are absent
            importlib.import_module(module.name)


import_all(schemathesis)
import_all(hypothesis)

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(600),
              # schemathesis' own strategies trip these; they are not the gateway's
              pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")]

EXAMPLES = int(os.environ.get("VF_FUZZ_EXAMPLES", "50"))
# Printed with the figures: VF_FUZZ_SEED=<it> replays a run (the gateway's own random IDs
# and timing aside).
SEED = int(os.environ.get("VF_FUZZ_SEED") or random.randrange(2**31))
GATEWAY_WRITES = (REQUESTS, REQUESTS_INTERACTIVE, VOICES, CONTROL)
# The registry's answers to valid data: an unknown voice or job, a job ID already finished.
REGISTRY_STATUSES = ["2xx", "404", "409", "429"]
# schemathesis' default answers to invalid data.
REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429", "5xx"]
Case = schemathesis.Case[Any]  # of any operation


@dataclass
class Report:
    operations: set[str] = field(default_factory=set)
    cases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    beyond: Counter[str] = field(default_factory=Counter)  # refusals no schema can see
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"seed {SEED}, {EXAMPLES} examples: {len(self.operations)} operations "
                f"{sorted(self.operations)}, "
                f"{sum(self.cases.values())} cases "
                f"({dict(self.cases)}), statuses {dict(sorted(self.statuses.items()))}, "
                f"{len(self.failures)} failures, valid data refused beyond the schema "
                f"{dict(self.beyond)}, {len(self.errors)} errors, "
                f"{self.seconds:.0f} s")


def config(url: str, key: str) -> schemathesis.Config:
    return schemathesis.Config.from_dict({
        "seed": SEED,
        "base-url": url,
        "headers": {"Authorization": f"Bearer {key}"},
        "workers": 1,
        "continue-on-failure": True,
        "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none"},
        "phases": {"stateful": {"enabled": False}},
        "request-timeout": 30,
        "checks": {
            "enabled": True,
            "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "503"]},
            "positive_data_acceptance": {"expected-statuses": REGISTRY_STATUSES},
            # Invalid data may also be refused for its size before it is read (a job of
            # 10,001 lines is over the body limit long before the 10,000-line rule).
            "negative_data_rejection": {"expected-statuses": [*REFUSALS, "413"]},
        },
        # A reference clip is valid audio of 3-30 s, which no schema can say: 422 is its
        # verdict on the bytes, not on the form. Nor can a schema say that a voice needs a
        # consent (a `consent` ID or a `consent_recording`, 400 `consent_required`) that
        # exists in the caller's tenant (404 `consent_not_found`) and is the sample's speaker.
        "operations": [
            {"include-path": "/v1/voices", "include-method": "POST", "checks": {
                "positive_data_acceptance": {"expected-statuses": [
                    *REGISTRY_STATUSES, "400", "404", "422"]}}},
            {"include-path": "/v1/audio/voice_consents", "include-method": "POST", "checks": {
                "positive_data_acceptance": {"expected-statuses": [*REGISTRY_STATUSES, "422"]}}},
            {"include-path": "/v1/audio/voices", "include-method": "POST", "checks": {
                "positive_data_acceptance": {"expected-statuses": [
                    *REGISTRY_STATUSES, "404", "422"]}}}],
    })


def with_voice(body: Any, voice: str, path: str) -> Any:
    """A valid body with the registered voice in it, so that the request is produced."""
    if not isinstance(body, dict):
        return body
    if path == "/v1/audio/speech":
        return {**body, "voice": voice if isinstance(body.get("voice"), str) else {"id": voice}}
    lines = [{**line, "voice": voice} if isinstance(line, dict) else line
             for line in body.get("lines", [])]
    return {**body, "voice": voice, "lines": lines}


@dataclass
class Registered:
    """The test's voice, and how to register it again after the fuzzer deleted it."""

    voice_id: str
    store: ObjectStore
    reference: bytes
    restored: int = 0

    def restore(self) -> None:
        register_voice(self.store, voice_id=self.voice_id, reference=self.reference,
                       prompt_text=REFERENCE_TEXT, language="en")
        self.restored += 1


def fuzz(url: str, key: str, voice: Registered) -> Report:
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config(url, key))
    report = Report()
    turn = [0]

    @schema.hook("map_case")
    def registered_voice(context: schemathesis.HookContext, case: Case) -> Any:
        positive = case.meta is None or case.meta.generation.mode.is_positive
        if positive and case.path in ("/v1/audio/speech", "/v1/jobs"):
            turn[0] += 1
            if turn[0] % 2:
                case.body = with_voice(case.body, voice.voice_id, case.path)
        return case

    @schema.hook("after_call")
    def keep_the_voice(context: schemathesis.HookContext, case: Case,
                       response: schemathesis.Response) -> None:
        """The engine learns IDs from answers (GET /v1/voices) and deletes them: the voice
        is registered again, so that later valid requests still reach Kafka."""
        params = case.path_parameters or {}
        if (case.method.lower() == "delete" and params.get("id") == voice.voice_id
                and response.status_code == 200):
            voice.restore()

    @schema.hook("filter_failure")
    def beyond_the_schema(context: schemathesis.HookContext, failure: Failure,
                          case: Case, response: schemathesis.Response) -> bool:
        """Every failure counts but valid data refused for what no schema can see: a voice
        not registered (a job's 400 `voice_not_found`), markup outside the pinyin and
        ARPAbet inventories (`param: annotations`)."""
        if not isinstance(failure, RejectedPositiveData):
            return True
        error = refusal(response)
        reason = ("voice_not_found" if error.get("code") == "voice_not_found" else
                  "annotations" if error.get("param") == "annotations" else None)
        if reason is None:
            return True
        report.beyond[f"{case.method.upper()} {case.path}: {reason}"] += 1
        return False

    started = time.monotonic()
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            record(report, event)
        elif isinstance(event, events.NonFatalError | events.FatalError):
            report.errors.append(str(getattr(event, "info", None) or event))
    report.seconds = time.monotonic() - started
    return report


def refusal(response: schemathesis.Response) -> dict[str, Any]:
    try:
        error = orjson.loads(response.content)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return {}
    return error if isinstance(error, dict) else {}


def record(report: Report, event: events.ScenarioFinished) -> None:
    recorder = event.recorder
    report.operations.add(recorder.label)
    report.cases[event.phase.value] += len(recorder.cases)
    for interaction in recorder.interactions.values():
        if interaction.response is not None:
            report.statuses[interaction.response.status_code] += 1
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is not None:
                failure = check.failure_info.failure
                response = recorder.find_response(case_id=case_id)
                answer = (f"{response.status_code} {response.content[:300]!r}"
                          if response is not None else "no response")
                report.failures.append(f"{recorder.label} [{check.name}] {failure.title}: "
                                       f"{failure.message}\n-> {answer}\n"
                                       f"{check.failure_info.code_sample}")


@dataclass(frozen=True)
class Produced:
    topic: str  # the spec's name, without the test's prefix
    key: bytes | None
    value: bytes | None


async def produced_records(settings: Settings, patience_s: float = 15.0) -> list[Produced]:
    """Every record on the topics the gateway writes, from the beginning. Read again (for at
    most `patience_s`) while a lane shows none: one CI run read nothing at all once, right
    after the fuzz had 29 jobs and 65 speech requests answered; a lane that stays empty
    still fails the test below."""
    deadline = time.monotonic() + patience_s
    while True:
        out = await _read_produced(settings)
        lanes = Counter(r.topic for r in out)
        if (lanes[REQUESTS.name] and lanes[REQUESTS_INTERACTIVE.name]) \
                or time.monotonic() > deadline:
            return out
        await asyncio.sleep(1.0)


async def _read_produced(settings: Settings) -> list[Produced]:
    prefix = settings.kafka.topic_prefix
    tps = [TopicPartition(prefix + spec.name, p) for spec in GATEWAY_WRITES
           for p in range(spec.partitions)]
    consumer = make_consumer(settings.kafka, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[Produced] = []
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= end for tp, end in ends.items()):
                return out
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                out.extend(Produced(tp.topic.removeprefix(prefix), r.key, r.value)
                           for r in records)
    finally:
        await consumer.stop()


def reader_verdict(record: Produced) -> None:
    """What the topic's reader does with the record: raises where it would reject it."""
    if record.topic == VOICES.name:  # a registration keyed by its voice, or a tombstone
        if record.value is not None:
            assert record.key == decode_voice(record.value).voice_id.encode(), record.key
        assert record.key, "a tts.voices record without a key"
    elif record.topic == CONTROL.name:
        command = decode_control(record.value)
        assert record.key == control_key(command), record.key
    else:  # both request lanes: the worker's own validation
        decode_request(record.value)


@pytest.fixture
def gw_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The test's topics, and a bucket of its own: the fuzzer deletes every voice it can
    list, so the session's bucket (other tests' voices) would make a run depend on the order
    of the tests, and a seed would not replay it."""
    prefix = settings.kafka.topic_prefix
    bucket = f"vf-fuzz-{uuid.uuid4().hex[:8]}"
    Minio(f"127.0.0.1:{stack.S3_PORT}", access_key=stack.S3_ACCESS_KEY,
          secret_key=stack.S3_SECRET_KEY, secure=False).make_bucket(bucket)
    # A lag threshold out of reach: the fake worker commits nothing, and 503 `overloaded`
    # would turn every later speech case away before its body is looked at.
    return Settings(kafka=settings.kafka, store=replace(settings.store, bucket=bucket),
                    worker=settings.worker,
                    gateway=GatewaySettings(keys_file=str(tmp_path / "keys"),
                                            group_id=f"vf-gateway-{prefix}", timeout_s=10.0,
                                            lag_interval_s=0.5, lag_threshold=1_000_000))


async def test_the_gateway_holds_to_its_openapi_document(gw_settings: Settings,
                                                         tmp_path: Path) -> None:
    # every scope (a 403 is the scopes' test, not the document's), and the tenant whose
    # voice the fuzz registers
    key = add_key(gw_settings.gateway.keys_path(), "default", rate=10_000, streams=50,
                  scopes=SCOPES)
    registered = Registered("narrator-1", make_store(gw_settings.store),
                            make_reference(tmp_path / "reference.wav"))  # docs' example voice
    registered.restore()
    registered.restored = 0
    async with RunningGateway(gw_settings, KeyRing(gw_settings.gateway.keys_path())) as gw, \
            FakeStreamingWorker(gw_settings) as worker:
        report = await asyncio.to_thread(fuzz, gw.url, key, registered)
    if os.environ.get("VF_FUZZ_VERBOSE"):
        print("\n\n".join(report.failures + report.errors))
    print(f"\nfuzz: {report.summary()}; {len(worker.seen)} speech requests answered, "
          f"voice deleted and restored {registered.restored} times")
    records = await produced_records(gw_settings)
    rejected = []
    for record in records:
        try:
            reader_verdict(record)
        except Exception as exc:
            rejected.append(f"{record}: {exc!r}")
    print(f"produced: {dict(Counter(r.topic for r in records))}, "
          f"{len(rejected)} a reader would reject")
    assert not report.failures, "\n\n".join(report.failures[:20]) + "\n" + report.summary()
    assert not report.errors, "\n".join(report.errors[:20])
    assert not rejected, "\n".join(rejected[:20])
    # Every operation but GET /openapi.json, which the engine leaves out as the schema itself.
    described = {f"{op.method.upper()} {op.path}" for op in OPERATIONS} - {"GET /openapi.json"}
    assert report.operations == described, report.summary()
    lanes = Counter(r.topic for r in records)
    assert lanes[REQUESTS.name] and lanes[REQUESTS_INTERACTIVE.name], \
        f"valid requests did not reach both lanes ({dict(lanes)}): the fuzz proved nothing"
