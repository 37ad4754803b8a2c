"""topics.partition_for must put a key where the Java client and aiokafka put it."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from topics import murmur2, partition_for

# org.apache.kafka.common.utils.Utils.murmur2 of the UTF-8 bytes (Java's UtilsTest).
JAVA_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_murmur2_matches_java_client(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


def test_murmur2_covers_every_tail_length() -> None:
    # Lengths 0..7 walk the 0-3 byte tail twice; each must still agree with aiokafka.
    data = b"voice-01"
    for n in range(len(data) + 1):
        assert murmur2(data[:n]) & 0xFFFFFFFF == aiokafka_murmur2(data[:n])


def test_murmur2_is_a_signed_java_int() -> None:
    assert murmur2(b"21") < 0
    assert all(-(2**31) <= murmur2(key.encode()) < 2**31 for key, _ in JAVA_VECTORS)


@pytest.mark.parametrize(("key", "partitions", "expected"), [
    ("21", 12, (-973932308 & 0x7FFFFFFF) % 12),
    ("foobar", 3, (-790332482 & 0x7FFFFFFF) % 3),
    ("abc", 12, 479470107 % 12),
])
def test_partition_for_java_keys(key: str, partitions: int, expected: int) -> None:
    assert partition_for(key, partitions) == expected
    assert partition_for(key.encode(), partitions) == expected


def test_partition_for_encodes_str_as_utf8() -> None:
    assert partition_for("四川-voice", 12) == partition_for("四川-voice".encode(), 12)


@pytest.mark.parametrize("partitions", [0, -1])
def test_partition_for_rejects_non_positive_partition_counts(partitions: int) -> None:
    with pytest.raises(ValueError, match="partitions must be positive"):
        partition_for("voice", partitions)


@given(st.binary(max_size=300))
def test_murmur2_equals_aiokafka(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == aiokafka_murmur2(data)


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=1000))
def test_partition_for_equals_aiokafka_default_partitioner(data: bytes, partitions: int) -> None:
    all_partitions = list(range(partitions))
    expected = DefaultPartitioner()(data, all_partitions, all_partitions)
    got = partition_for(data, partitions)
    assert got == expected
    assert 0 <= got < partitions


@given(st.text(max_size=80), st.integers(min_value=1, max_value=64))
def test_partition_for_str_equals_aiokafka_on_utf8(key: str, partitions: int) -> None:
    all_partitions = list(range(partitions))
    assert partition_for(key, partitions) == DefaultPartitioner()(
        key.encode("utf-8"), all_partitions, all_partitions)
