"""`voicefactory topics create|describe|grow`: the contract's topics on the broker, and drift.

    settings --admin_client--> create_topics (create only) or grow_request_lanes (grow: a pair
    of request lanes, plain or shards, to N partitions), at the replication the flags name or
    the broker count implies (topics.specs.replication_for) --> describe_topics --> one line
    per topic on stdout --> drift() against topics/specs.py --> `drift: ...` lines on stderr,
    exit 1 when there is any, else 0
"""

from __future__ import annotations

import sys
from typing import TextIO

from consumers.kafka import security_kwargs
from consumers.settings import Settings
from topics.admin import (
    admin_client,
    create_topics,
    describe_topics,
    drift,
    grow_request_lanes,
    replication,
)


async def topics_command(settings: Settings, action: str, *, replication_factor: int | None,
                         min_insync_replicas: int | None, partitions: int | None = None,
                         lanes: str = "plain", out: TextIO = sys.stdout,
                         err: TextIO = sys.stderr) -> int:
    prefix = settings.kafka.topic_prefix
    admin = admin_client(settings.kafka.bootstrap, **security_kwargs(settings.kafka))
    await admin.start()
    try:
        wanted, brokers = await replication(admin, factor=replication_factor,
                                            min_insync=min_insync_replicas)
        print(f"replication: factor {wanted.factor}, min.insync.replicas {wanted.min_insync} "
              f"({brokers} broker{'s' if brokers != 1 else ''})", file=out)
        if action == "create":
            created = await create_topics(admin, prefix=prefix,
                                          replication_factor=wanted.factor,
                                          min_insync_replicas=wanted.min_insync)
            print(f"created: {', '.join(created) or 'nothing (all present)'}", file=out)
        elif action == "grow":
            assert partitions is not None, "the CLI asks for --partitions"
            try:
                grown = await grow_request_lanes(admin, prefix=prefix, partitions=partitions,
                                                 lanes=lanes)
            except (ValueError, RuntimeError) as exc:
                print(f"topics grow: {exc}", file=err)
                return 1
            print(f"grown to {partitions} partitions: {', '.join(grown) or 'nothing (already)'}"
                  "; workers take the new partitions at their next rebalance", file=out)
        states = await describe_topics(admin, prefix=prefix)
        for s in states:
            print(f"{s.name:32} partitions={s.partitions:<3} rf={s.replication_factor} "
                  f"min.insync.replicas={s.configs.get('min.insync.replicas', '-')} "
                  f"cleanup={s.configs.get('cleanup.policy', '-')} "
                  f"retention.ms={s.configs.get('retention.ms', '-')}" if s.exists
                  else f"{s.name:32} MISSING", file=out)
        problems = drift(states, prefix=prefix, replication_factor=wanted.factor,
                         min_insync_replicas=wanted.min_insync)
        for p in problems:
            print(f"drift: {p}", file=err)
        return 1 if problems else 0
    finally:
        await admin.close()
