"""Kafka clients from `KafkaSettings` (bootstrap, TLS/SASL), in one place.

    KafkaSettings --security_kwargs()--> aiokafka's security arguments
        --> make_producer / make_consumer (the worker and the clients)
        --> consumers.aggregator.app.broker_credentials (faust's credentials, same values)

`read_since`: a group-less consumer's partitions read from a point in time up to where they
ended when the call began, bounded in time (the worker's cancel replay, the gateway's job
progress).
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.helpers import create_ssl_context

from consumers.settings import KafkaSettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_kwargs(kafka: KafkaSettings) -> dict[str, Any]:
    """aiokafka's security_protocol, ssl_context and sasl_* arguments for these settings.

    A SASL protocol without VF_KAFKA_SASL_MECHANISM means PLAIN (aiokafka's default too).
    VF_KAFKA_SSL_CAFILE, when set, is the only trust anchor; a missing file fails here."""
    protocol = kafka.security_protocol.upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"VF_KAFKA_SECURITY_PROTOCOL {kafka.security_protocol!r} is not one "
                         f"of {', '.join(PROTOCOLS)}")
    kwargs: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        # Host names are checked: a broker's certificate must name the address dialled.
        if kafka.ssl_cafile and not os.path.isfile(kafka.ssl_cafile):
            raise ValueError(f"VF_KAFKA_SSL_CAFILE {kafka.ssl_cafile}: no such file")
        kwargs["ssl_context"] = create_ssl_context(cafile=kafka.ssl_cafile or None)
    if protocol.startswith("SASL"):
        kwargs.update(sasl_mechanism=kafka.sasl_mechanism or "PLAIN",
                      sasl_plain_username=kafka.sasl_username,
                      sasl_plain_password=kafka.sasl_password.reveal())
    return kwargs


# The producer's max_request_size (aiokafka's default, the broker's message.max.bytes is
# about the same): the worker's dead letters are sized from it (worker/deadletters.py).
PRODUCER_MAX_REQUEST_BYTES = 1_048_576


def make_producer(kafka: KafkaSettings, **extra: Any) -> AIOKafkaProducer:
    # acks=all + idempotence: a result is "produced" only once the broker has it durably.
    extra.setdefault("max_request_size", PRODUCER_MAX_REQUEST_BYTES)
    return AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all",
                            enable_idempotence=True, client_id="voicefactory",
                            **security_kwargs(kafka), **extra)


def make_consumer(kafka: KafkaSettings, *topics: str, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, bootstrap_servers=kafka.bootstrap,
                            client_id="voicefactory", **security_kwargs(kafka), **extra)


_ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
              "sticky": StickyPartitionAssignor}


def assignors(name: str) -> tuple[Any, ...]:
    """The partition assignment strategy by name (VF_ASSIGNOR): sticky, range or roundrobin."""
    try:
        return (_ASSIGNORS[name],)
    except KeyError:
        names = ", ".join(_ASSIGNORS)
        raise ValueError(f"VF_ASSIGNOR must be one of {names}, got {name!r}") from None


async def read_since(consumer: AIOKafkaConsumer, tps: list[TopicPartition], since_ms: int, *,
                     limit_s: float, read: Callable[[], Awaitable[None]]) -> bool:
    """Position each assigned partition at its first record at or after `since_ms` (at its
    end when it has none), then call `read()` (one fetch) until every partition is past the
    end offset it had now. False when `limit_s` ran out first.

    The ends are read first and a partition without such a record is sought to that
    offset, not with seek_to_end: aiokafka resolves seek_to_end lazily, at a later fetch
    (later still when a new partition's leader is not known yet), so a record produced
    meanwhile (a cancel sent right after a worker started) fell before the end it found
    and was never read."""
    ends = await consumer.end_offsets(tps)
    found = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
    for tp in tps:
        hit = found.get(tp)
        consumer.seek(tp, ends[tp] if hit is None else hit.offset)
    deadline = time.monotonic() + limit_s
    while any([await consumer.position(tp) < ends[tp] for tp in tps]):
        if time.monotonic() > deadline:
            return False
        await read()
    return True
