"""What replication costs a producer: `python -m bench.replication [--count 2000 --rate 200]`.

Produce latency at acks=all (the project's producers: idempotent, acks=all) to a topic of
replication factor 3 with min.insync.replicas 2, against the same with replication factor 1,
on the same three-node SASL_SSL cluster (`voicefactory dev up --cluster`), so TLS, SASL and
the machine are the same and only the replication differs:

    eval "$(voicefactory dev env --cluster --role admin)" && python -m bench.replication

Flow: VF_KAFKA_* (an identity that may create and delete topics: the admin) -> two
throw-away topics `vf-bench-rf3-<tag>` and `vf-bench-rf1-<tag>` (12 partitions each) -> per
topic, `--count` records of `--size` bytes
sent at `--rate` a second, keyed round-robin over the partitions; each latency is from
send() to its acknowledgement -> p50 / p99 / max per topic printed (and as JSON with
`--json`) -> the topics are deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

from aiokafka.admin import NewTopic

from bench.stats import percentile
from consumers.kafka import make_producer, security_kwargs
from consumers.settings import Settings
from topics.admin import admin_client

PARTITIONS = 12


async def _latencies(settings: Settings, topic: str, *, count: int, rate: float,
                     size: int) -> list[float]:
    producer = make_producer(settings.kafka, linger_ms=0)
    await producer.start()
    payload = b"x" * size
    latencies: list[float] = []

    async def one(i: int) -> None:
        sent = time.perf_counter()
        await (await producer.send(topic, payload, key=str(i % PARTITIONS).encode()))
        latencies.append((time.perf_counter() - sent) * 1000)

    try:
        for i in range(50):  # warm-up: connections, metadata, producer id
            await one(i)
        latencies.clear()
        tasks = []
        started = time.perf_counter()
        for i in range(count):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
    finally:
        await producer.stop()
    return latencies


async def run(*, count: int, rate: float, size: int) -> dict[str, dict[str, float]]:
    settings = Settings.from_env()
    tag = uuid.uuid4().hex[:6]
    topics = {"rf3": (f"vf-bench-rf3-{tag}", 3, "2"), "rf1": (f"vf-bench-rf1-{tag}", 1, "1")}
    admin = admin_client(settings.kafka.bootstrap, **security_kwargs(settings.kafka))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, rf,
                                            topic_configs={"min.insync.replicas": isr})
                                   for name, rf, isr in topics.values()])
        await asyncio.sleep(2.0)  # leaders elected and known to every broker
        out: dict[str, dict[str, float]] = {}
        for label, (name, _, isr) in topics.items():
            ms = await _latencies(settings, name, count=count, rate=rate, size=size)
            out[label] = {"min_insync_replicas": float(isr), "p50_ms": percentile(ms, 50),
                          "p99_ms": percentile(ms, 99), "max_ms": max(ms), "count": len(ms)}
        return out
    finally:
        await admin.delete_topics([name for name, _, _ in topics.values()])
        await admin.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="records a second")
    parser.add_argument("--size", type=int, default=512, help="bytes a record")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(count=args.count, rate=args.rate, size=args.size))
    print(f"acks=all, {args.count} records of {args.size} B at {args.rate:g}/s to "
          f"{Settings.from_env().kafka.bootstrap}")
    print(f"{'topic':<6} {'min.isr':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for label, f in figures.items():
        print(f"{label:<6} {f['min_insync_replicas']:>7.0f} {f['p50_ms']:>8.2f} "
              f"{f['p99_ms']:>8.2f} {f['max_ms']:>8.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
