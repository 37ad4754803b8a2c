"""`voicefactory dlq get`: the original value of a dead letter, from the object store.

    TOPIC PARTITION OFFSET (of the original record, as the DLQ record names them)
        -> pipeline.keys.dlq_value_key -> store.get -> sha256 checked against the object's
        metadata -> the bytes, to a file

Only values too big to carry inline are stored (the DLQ record's `value_ref`); a smaller
one is in the record itself (`value_b64`), and `omitted` lists what neither holds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.keys import dlq_value_key
from pipeline.storage import ObjectStore


@dataclass(frozen=True)
class StoredValue:
    ref: str
    data: bytes
    sha256: str


class NotStored(LookupError):
    pass


def stored_value(store: ObjectStore, topic: str, partition: int, offset: int) -> StoredValue:
    """The stored value of the record at topic/partition/offset; raises NotStored when there
    is none, ValueError when its bytes do not match the sha256 it was stored with."""
    key = dlq_value_key(topic, partition, offset)
    info = store.stat(key)
    data = store.get(key)
    if info is None or data is None:
        raise NotStored(f"no stored value at s3://{store.bucket}/{key}: the DLQ record of "
                        f"{topic}/{partition}/{offset} carries it inline (value_b64) or lists "
                        f"it in `omitted`")
    digest = hashlib.sha256(data).hexdigest()
    expected = info.metadata.get("sha256")
    if expected is not None and expected != digest:
        raise ValueError(f"s3://{store.bucket}/{key}: sha256 {digest} does not match the "
                         f"{expected} it was stored with")
    return StoredValue(ref=f"s3://{store.bucket}/{key}", data=data, sha256=digest)
