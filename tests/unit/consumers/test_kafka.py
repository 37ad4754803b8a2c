"""One place turns KafkaSettings into client security arguments (no broker needed)."""

from __future__ import annotations

import ssl

import pytest

from consumers.kafka import assignors, make_consumer, make_producer, security_kwargs
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
