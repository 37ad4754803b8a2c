"""Topics a measurement makes under a prefix of its own, and their removal.

    make_under(kafka, prefix, specs) -> the contract's topics `specs`, each named prefix + name
    delete_under(kafka, prefixes)    -> every topic whose name starts with one of the prefixes:
                                        what the bench made and what its processes made on the
                                        way (faust's changelogs for the aggregator's tables)
    scratch_topics(...)              -> both around a block, for the measurements that make
                                        their own prefix (assignors, the cache's group, the
                                        gateway's first byte)

By prefix rather than by a list of names, so a topic the bench never heard of (a table a
newer aggregator keeps) goes too, and repeated runs leave the broker as they found it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from consumers.kafka import security_kwargs
from consumers.settings import KafkaSettings
from topics.admin import admin_client, create_topics
from topics.specs import TopicSpec


async def make_under(kafka: KafkaSettings, prefix: str, specs: tuple[TopicSpec, ...]) -> None:
    admin = admin_client(kafka.bootstrap, **security_kwargs(kafka))
    await admin.start()
    try:
        await create_topics(admin, prefix=prefix, specs=specs)
    finally:
        await admin.close()


async def delete_under(kafka: KafkaSettings, prefixes: Iterable[str]) -> list[str]:
    """Delete every topic under one of `prefixes` (each must end in its separator, "."), and
    return their names."""
    heads = tuple(prefixes)
    if not heads:
        return []
    if any(not head.endswith(".") for head in heads):  # "bench-a" would take "bench-ab.x"
        raise ValueError(f"a topic prefix ends in '.': {heads}")
    admin = admin_client(kafka.bootstrap, **security_kwargs(kafka))
    await admin.start()
    try:
        doomed = sorted(t for t in await admin.list_topics() if t.startswith(heads))
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def scratch_topics(kafka: KafkaSettings, prefix: str,
                         specs: tuple[TopicSpec, ...]) -> AsyncIterator[str]:
    """The topics for the block's length; yields the prefix."""
    await make_under(kafka, prefix, specs)
    try:
        yield prefix
    finally:
        await delete_under(kafka, [prefix])
