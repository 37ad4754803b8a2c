"""`voicefactory usage [--tenant T] [--month YYYY-MM] [--json]`: a tenant's month as published.

    flags + VF_* -> settings -> pipeline.usage.read_usage(store, tenant, month,
      report_source(VF_TOPIC_PREFIX)) (the reports the aggregator writes every
      VF_USAGE_PUBLISH_S, docs/usage.md) -> one line of text, or the JSON object

The operator's view of what GET /v1/usage shows a tenant: the same numbers, read straight
from the store, for any tenant (the CLI holds the store's credentials, not an API key).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

from consumers.settings import Settings
from consumers.wiring import make_store
from pipeline.keys import check_month
from pipeline.storage import ObjectStore
from pipeline.usage import Usage, current_month, read_usage, report_source
from topics.tenancy import DEFAULT_TENANT, check_tenant


def describe(usage: Usage) -> str:
    if usage.updated_at is None:
        return f"tenant {usage.tenant}, {usage.month} (UTC): nothing counted"
    return (f"tenant {usage.tenant}, {usage.month} (UTC): {usage.audio_s:.3f} s of audio, "
            f"{usage.engine_s:.3f} s of engine time, {usage.requests} requests (as published "
            f"at {usage.updated_at}, {usage.partitions} partition reports)")


def show_usage(store: ObjectStore, source: str, tenant: str, month: str, *, as_json: bool,
               out: TextIO) -> Usage:
    usage = read_usage(store, tenant, month, source)
    out.write((msgspec.json.encode(usage).decode() if as_json else describe(usage)) + "\n")
    return usage


def cmd_usage(args: argparse.Namespace) -> int:
    try:
        tenant = check_tenant(args.tenant)
        month = check_month(args.month or current_month())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = Settings.from_env().with_overrides(
        kafka={"bootstrap": args.bootstrap, "topic_prefix": args.topic_prefix},
        store={"endpoint": args.s3_endpoint, "bucket": args.bucket})
    show_usage(make_store(settings.store), report_source(settings.kafka.topic_prefix), tenant,
               month, as_json=args.json, out=sys.stdout)
    return 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser],
                                          argparse.ArgumentParser]) -> None:
    usage = common(sub.add_parser(
        "usage", help="a tenant's audio and engine seconds of a month (docs/usage.md)",
        description="What the aggregator last published (every VF_USAGE_PUBLISH_S): audio "
                    "seconds, engine seconds and distinct requests of one tenant in one UTC "
                    "month, each request counted once."))
    usage.add_argument("--tenant", default=DEFAULT_TENANT, help="default: default")
    usage.add_argument("--month", help="YYYY-MM (UTC); default: the current month")
    usage.add_argument("--json", action="store_true", help="print the JSON object")
    usage.set_defaults(func=cmd_usage)
