"""The worker's one error policy (errors.py) and the answers it bounds (publisher.py,
deadletters.py), over producer and store stand-ins that raise aiokafka's and the store's
real error classes; the broker and S3 themselves are exercised by tests/integration."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass, field

import orjson
import pytest
from aiokafka import ConsumerRecord
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    PolicyViolationError,
    ProducerFenced,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from consumers.worker.deadletters import PREFIX_BYTES, dead_letter
from consumers.worker.errors import (
    Backoff,
    FatalPublishError,
    Undeliverable,
    Verdict,
    classify,
    deliver,
)
from consumers.worker.publisher import Publisher
from tests.unit.consumers.worker.fakes import NAMES, FakeProducer, result
from topics.errors import ErrorCode, VoiceFactoryError
from topics.events import SynthesisResult

LIMIT = 64 * 1024  # the producer's max_request_size in these tests
FAST = Backoff(max_s=0.001, base_s=0.001)


@pytest.mark.parametrize(("exc", "verdict"), [
    (KafkaConnectionError(), Verdict.RETRY),
    (NotLeaderForPartitionError(), Verdict.RETRY),
    (KafkaTimeoutError(), Verdict.RETRY),  # flagged non-retriable, but an outage
    (MessageSizeTooLargeError(), Verdict.GIVE_UP),
    (PolicyViolationError(), Verdict.GIVE_UP),
    (ProducerFenced(), Verdict.FATAL),
    (TopicAuthorizationFailedError(), Verdict.FATAL),
    (SaslAuthenticationFailed(), Verdict.FATAL),
])
def test_classify_reads_retriable_and_knows_the_fatal_states(exc: KafkaError,
                                                             verdict: Verdict) -> None:
    assert classify(exc) is verdict


async def test_deliver_retries_a_retriable_error_until_it_succeeds() -> None:
    errors: list[KafkaError] = [KafkaConnectionError(), NotLeaderForPartitionError()]

    async def attempt() -> str:
        if errors:
            raise errors.pop(0)
        return "acked"

    assert await deliver(attempt, what="test", backoff=FAST) == "acked"
    assert errors == []


async def test_deliver_gives_up_at_once_on_a_final_refusal() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise MessageSizeTooLargeError("1200442 bytes")

    with pytest.raises(Undeliverable, match="MessageSizeTooLargeError"):
        await deliver(attempt, what="test", backoff=FAST)
    assert calls == 1


async def test_deliver_reports_a_fatal_error_once_and_raises() -> None:
    seen: list[KafkaError] = []

    async def attempt() -> None:
        raise ProducerFenced()

    with pytest.raises(FatalPublishError):
        await deliver(attempt, what="test", backoff=FAST, on_fatal=seen.append)
    assert [type(e) for e in seen] == [ProducerFenced]


# -- the DLQ: a record that fits whatever the input -----------------------------------------


@dataclass
class SizedProducer(FakeProducer):
    """Refuses what a real producer refuses: a record over its max_request_size."""

    max_bytes: int = LIMIT
    refused: list[int] = field(default_factory=list)

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[None]:
        size = len(value) + len(key or b"") + sum(len(k) + len(v or b"")
                                                 for k, v in headers or [])
        if size > self.max_bytes:
            self.refused.append(size)
            raise MessageSizeTooLargeError(f"{size} bytes is over {self.max_bytes}")
        return await super().send(topic, value, key, partition, headers)


@dataclass
class FakeStore:
    bucket: str = "vf"
    objects: dict[str, bytes] = field(default_factory=dict)
    failures: int = 0  # the next this many puts raise the store's error
    retryable: bool = True

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        if self.failures:
            self.failures -= 1
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"put {key}: down",
                                    retryable=self.retryable)
        assert metadata is not None and metadata["sha256"] == hashlib.sha256(data).hexdigest()
        self.objects[key] = data


def incoming(value: bytes | None, *, key: bytes | None = b"voice-1",
             headers: list[tuple[str, bytes | None]] | None = None,
             offset: int = 7) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic=NAMES.requests, partition=3, offset=offset,
                          timestamp=1_700_000_000_000, timestamp_type=0, key=key,
                          value=value, checksum=None, serialized_key_size=len(key or b""),
                          serialized_value_size=len(value or b""),
                          headers=headers or [])


def publisher(producer: FakeProducer, store: FakeStore | None = None,
              store_retry_s: float = 300.0) -> Publisher:
    return Publisher(producer=producer, names=NAMES, max_backoff_s=0.001, store=store,  # type: ignore[arg-type]
                     max_request_size=LIMIT, store_retry_s=store_retry_s)


def dlq_sent(producer: FakeProducer) -> list[dict[str, object]]:
    return [orjson.loads(s.value) for s in producer.sent if s.topic == NAMES.dlq]


async def test_a_small_bad_record_goes_to_the_dlq_inline_with_its_hash() -> None:
    producer = SizedProducer()
    rec = incoming(b"\xff not json", headers=[("traceparent", b"00-ab"), ("empty", None)])
    await publisher(producer, FakeStore()).publish(rec, dlq=dead_letter(rec, "invalid_json"))
    [dlq] = dlq_sent(producer)
    assert base64.b64decode(str(dlq["value_b64"])) == b"\xff not json"
    assert dlq["value_sha256"] == hashlib.sha256(b"\xff not json").hexdigest()
    assert dlq["headers"] == [["traceparent", base64.b64encode(b"00-ab").decode()],
                              ["empty", None]]
    assert "value_ref" not in dlq and "omitted" not in dlq
    assert producer.sent[0].key == b"voice-1"
    assert producer.sent[0].headers[-1] == ("vf-reason", b"invalid_json")


async def test_a_value_too_big_to_carry_is_stored_and_referenced() -> None:
    producer, store = SizedProducer(), FakeStore()
    value = bytes(range(256)) * (LIMIT // 256)  # the record alone fills the producer's limit
    rec = incoming(value)
    await publisher(producer, store).publish(rec, dlq=dead_letter(rec, "invalid_json: x"))
    assert producer.refused == []  # sized before sending, not after a refusal
    [dlq] = dlq_sent(producer)
    assert dlq["value_ref"] == f"s3://vf/dlq/{NAMES.requests}/3/7.bin"
    assert store.objects[f"dlq/{NAMES.requests}/3/7.bin"] == value
    assert dlq["value_sha256"] == hashlib.sha256(value).hexdigest()
    assert dlq["value_bytes"] == len(value) and "value_b64" not in dlq  # default: ""
    assert base64.b64decode(str(dlq["value_prefix_b64"])) == value[:PREFIX_BYTES]
    assert len(producer.sent[0].value) < LIMIT // 2


async def test_huge_headers_and_key_are_left_out_and_named() -> None:
    producer = SizedProducer()
    rec = incoming(b"x" * LIMIT, key=b"k" * (LIMIT // 2),
                   headers=[("big", b"h" * (LIMIT // 2))])
    await publisher(producer, FakeStore()).publish(rec, dlq=dead_letter(rec, "invalid_json"))
    [dlq] = dlq_sent(producer)
    assert dlq["omitted"] == ["headers", "key"]
    assert producer.sent[0].key is None
    assert [name for name, _ in producer.sent[0].headers] == ["vf-reason"]


async def test_a_small_value_stays_inline_when_its_headers_are_too_big() -> None:
    producer, store = SizedProducer(), FakeStore()
    rec = incoming(b"\xff small", headers=[("big", b"h" * LIMIT)])
    await publisher(producer, store).publish(rec, dlq=dead_letter(rec, "invalid_json"))
    [dlq] = dlq_sent(producer)
    assert base64.b64decode(str(dlq["value_b64"])) == b"\xff small"
    assert dlq["omitted"] == ["headers"] and "value_ref" not in dlq
    assert store.objects == {} and producer.sent[0].key == b"voice-1"


async def test_a_store_that_keeps_failing_leaves_the_prefix_and_the_hash() -> None:
    producer = SizedProducer()
    store = FakeStore(failures=1000)
    value = b"v" * LIMIT
    rec = incoming(value)
    await publisher(producer, store, store_retry_s=0.05).publish(
        rec, dlq=dead_letter(rec, "invalid_json"))
    [dlq] = dlq_sent(producer)
    assert "value_ref" not in dlq and dlq["omitted"] == ["value"]
    assert dlq["value_sha256"] == hashlib.sha256(value).hexdigest()
    assert base64.b64decode(str(dlq["value_prefix_b64"])) == value[:PREFIX_BYTES]
    assert store.failures < 1000  # it was tried, and retried


async def test_a_store_that_refuses_for_good_is_not_retried() -> None:
    store = FakeStore(failures=5, retryable=False)
    rec = incoming(b"v" * LIMIT)
    await publisher(SizedProducer(), store).publish(rec, dlq=dead_letter(rec, "x"))
    assert store.failures == 4


async def test_a_refused_inline_record_falls_back_to_a_smaller_one() -> None:
    # The broker (a topic's max.message.bytes) refuses what the estimate let through.
    producer = SizedProducer(max_bytes=2000)
    rec = incoming(b"y" * 1500)
    await publisher(producer, FakeStore()).publish(rec, dlq=dead_letter(rec, "invalid_json"))
    assert len(producer.refused) == 1
    [dlq] = dlq_sent(producer)
    assert str(dlq["value_ref"]).endswith("/7.bin")


async def test_a_dead_letter_refused_at_every_size_does_not_loop() -> None:
    producer = FakeProducer(nack=PolicyViolationError("no"))
    rec = incoming(b"z" * 10)
    await asyncio.wait_for(publisher(producer, FakeStore()).publish(
        rec, dlq=dead_letter(rec, "invalid_json")), 5)
    assert 1 < len(producer.sent) <= 3  # inline, by ref, minimal: each once


async def test_a_retriable_dlq_error_is_retried_until_acknowledged() -> None:
    producer = FakeProducer(fail=KafkaConnectionError("down"), fail_times=3)
    rec = incoming(b"\xff")
    await asyncio.wait_for(publisher(producer).publish(rec, dlq=dead_letter(rec, "x")), 5)
    [dlq] = dlq_sent(producer)
    assert base64.b64decode(str(dlq["value_b64"])) == b"\xff"


async def test_a_result_refused_for_good_becomes_a_dead_letter() -> None:
    producer = SizedProducer(max_bytes=1500)
    rec = incoming(b"{}")
    await publisher(producer, FakeStore()).publish(rec, result=SynthesisResult(
        request_id="r7", voice_id="v1", status="succeeded", metadata={"m": "x" * 2000},
        completed_at="2026-12-02T00:00:00Z"))
    [dlq] = dlq_sent(producer)
    assert str(dlq["reason"]).startswith("result undeliverable")


async def test_a_fatal_error_stops_publishing_and_reports_it() -> None:
    seen: list[KafkaError] = []
    producer = FakeProducer(fail=TopicAuthorizationFailedError())
    rec = incoming(b"{}")
    pub = Publisher(producer=producer, names=NAMES, max_backoff_s=0.001,
                    on_fatal=seen.append)
    with pytest.raises(FatalPublishError):
        await pub.publish(rec, result=result(7))
    assert [type(e) for e in seen] == [TopicAuthorizationFailedError]
