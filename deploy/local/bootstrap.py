"""Fill a freshly started local stack: the DESIGN.md topics and the bucket, with retries
while the broker finishes its start-up."""

from __future__ import annotations

import asyncio
import time
from typing import TextIO

from minio import Minio

from topics.admin import admin_client, create_topics, describe_topics, drift, replication


def ensure_topics(bootstrap: str, out: TextIO, deadline: float) -> None:
    created: list[str] = []  # across attempts: a retry must not report them as pre-existing

    async def attempt() -> None:
        admin = admin_client(bootstrap)
        await admin.start()
        try:
            wanted, _ = await replication(admin)  # one node: factor 1, min.insync.replicas 1
            created.extend(await create_topics(admin, replication_factor=wanted.factor,
                                               min_insync_replicas=wanted.min_insync))
            problems = drift(await describe_topics(admin), replication_factor=wanted.factor,
                             min_insync_replicas=wanted.min_insync)
            if problems:
                raise RuntimeError("; ".join(str(p) for p in problems))
            # Asking for a group coordinator makes the broker create __consumer_offsets now,
            # rather than during the first worker's join (where aiokafka logs it as an error).
            await admin.find_coordinator("vf-synth")
        finally:
            await admin.close()

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            asyncio.run(attempt())
        except Exception as exc:  # the broker may still be electing its controller
            last = exc
            time.sleep(0.5)
            continue
        print(f"topics: {'created ' + ', '.join(created) if created else 'all present'}", file=out)
        return
    raise RuntimeError(f"could not create the topics before the deadline: {last}")


def ensure_bucket(endpoint: str, access_key: str, secret_key: str, bucket: str, out: TextIO,
                  deadline: float) -> None:
    secure = endpoint.startswith("https://")
    client = Minio(endpoint.split("://", 1)[-1], access_key=access_key, secret_key=secret_key,
                   secure=secure, region="us-east-1")
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if client.bucket_exists(bucket):
                print(f"bucket: {bucket} present", file=out)
            else:
                client.make_bucket(bucket)
                print(f"bucket: {bucket} created", file=out)
            return
        except Exception as exc:  # the gateway may not serve requests yet
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"could not create bucket {bucket}: {last}")
