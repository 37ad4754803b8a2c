"""One place turns KafkaSettings into client security arguments, and read_since positions a
reader without skipping what is produced meanwhile (no broker needed)."""

from __future__ import annotations

import ssl
from typing import Any, cast

import pytest
from aiokafka import TopicPartition

from consumers.kafka import assignors, make_consumer, make_producer, read_since, security_kwargs
from consumers.settings import KafkaSettings, Secret


def test_plaintext_passes_only_the_protocol() -> None:
    assert security_kwargs(KafkaSettings()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gets_a_tls_context_and_the_revealed_password() -> None:
    kwargs = security_kwargs(KafkaSettings(security_protocol="sasl_ssl",
                                           sasl_mechanism="SCRAM-SHA-512", sasl_username="u",
                                           sasl_password=Secret("p")))
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"],
            kwargs["sasl_plain_password"]) == ("SCRAM-SHA-512", "u", "p")


def test_sasl_without_a_mechanism_is_plain_and_unknown_protocols_are_refused() -> None:
    kwargs = security_kwargs(KafkaSettings(security_protocol="SASL_PLAINTEXT"))
    assert kwargs["sasl_mechanism"] == "PLAIN" and "ssl_context" not in kwargs
    with pytest.raises(ValueError, match="VF_KAFKA_SECURITY_PROTOCOL 'KERBEROS' is not one of"):
        security_kwargs(KafkaSettings(security_protocol="KERBEROS"))


async def test_clients_are_built_from_the_kafka_group() -> None:
    kafka = KafkaSettings(bootstrap="k1:9092,k2:9092")
    producer = make_producer(kafka)
    consumer = make_consumer(kafka, "tts.requests", group_id="g")
    try:
        assert producer.client._bootstrap_servers == "k1:9092,k2:9092"
        assert consumer._client._bootstrap_servers == "k1:9092,k2:9092"
    finally:
        await consumer.stop()  # never started: releases what the constructor made
    with pytest.raises(ValueError, match="VF_ASSIGNOR must be one of"):
        assignors("fair")


class _GrowingTopic:
    """One partition whose end moves while the reader positions itself: a record (offset 5)
    is produced during offsets_for_times, which found nothing at or after the time asked."""

    def __init__(self) -> None:
        self.end = 5
        self.pos: dict[TopicPartition, int] = {}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, self.end)

    async def offsets_for_times(self, query: dict[TopicPartition, int]) -> dict[TopicPartition,
                                                                                None]:
        self.end += 1  # produced meanwhile
        return dict.fromkeys(query)

    async def seek_to_end(self, tp: TopicPartition) -> None:  # what aiokafka resolves later
        self.pos[tp] = self.end

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.pos[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.pos[tp]


async def test_read_since_never_lands_past_a_record_produced_while_it_positions() -> None:
    """A cancel sent right after a worker started fell before the end that aiokafka's lazy
    seek_to_end found, and the worker never read it (a CI failure of test_lanes)."""
    tp = TopicPartition("tts.control", 2)
    topic = _GrowingTopic()

    async def read() -> None:
        raise AssertionError("nothing is behind the end read first")

    assert await read_since(cast(Any, topic), [tp], 1_000, limit_s=1, read=read)
    assert topic.pos[tp] == 5  # the next fetch reads the record produced meanwhile
