"""Kafka client construction from `Settings` (bootstrap, TLS/SASL), in one place."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.helpers import create_ssl_context

from topics.config import Settings


def security_kwargs(settings: Settings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = create_ssl_context()
    if settings.kafka_sasl_mechanism:
        kwargs.update(sasl_mechanism=settings.kafka_sasl_mechanism,
                      sasl_plain_username=settings.kafka_sasl_username,
                      sasl_plain_password=settings.kafka_sasl_password.reveal())
    return kwargs


def make_producer(settings: Settings, **extra: Any) -> AIOKafkaProducer:
    # acks=all + idempotence: a result is "produced" only once the broker has it durably.
    return AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all",
                            enable_idempotence=True, client_id="voicefactory",
                            **security_kwargs(settings), **extra)


def make_consumer(settings: Settings, *topics: str, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, bootstrap_servers=settings.kafka_bootstrap,
                            client_id="voicefactory", **security_kwargs(settings), **extra)


_ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
              "sticky": StickyPartitionAssignor}


def assignors(name: str) -> tuple[Any, ...]:
    """The partition assignment strategy by name (VF_ASSIGNOR): sticky, range or roundrobin."""
    try:
        return (_ASSIGNORS[name],)
    except KeyError:
        names = ", ".join(_ASSIGNORS)
        raise ValueError(f"VF_ASSIGNOR must be one of {names}, got {name!r}") from None
