"""Kafka clients from `KafkaSettings` (bootstrap, TLS/SASL), in one place.

    KafkaSettings --security_kwargs()--> aiokafka's security arguments
        --> make_producer / make_consumer (the worker and the clients)
        --> consumers.aggregator.app.broker_credentials (faust's credentials, same values)
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.helpers import create_ssl_context

from consumers.settings import KafkaSettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_kwargs(kafka: KafkaSettings) -> dict[str, Any]:
    """aiokafka's security_protocol, ssl_context and sasl_* arguments for these settings.

    A SASL protocol without VF_KAFKA_SASL_MECHANISM means PLAIN (aiokafka's default too)."""
    protocol = kafka.security_protocol.upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"VF_KAFKA_SECURITY_PROTOCOL {kafka.security_protocol!r} is not one "
                         f"of {', '.join(PROTOCOLS)}")
    kwargs: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = create_ssl_context()
    if protocol.startswith("SASL"):
        kwargs.update(sasl_mechanism=kafka.sasl_mechanism or "PLAIN",
                      sasl_plain_username=kafka.sasl_username,
                      sasl_plain_password=kafka.sasl_password.reveal())
    return kwargs


def make_producer(kafka: KafkaSettings, **extra: Any) -> AIOKafkaProducer:
    # acks=all + idempotence: a result is "produced" only once the broker has it durably.
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
