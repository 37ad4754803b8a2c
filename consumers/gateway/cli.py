"""`voicefactory gateway [--port N]` and `voicefactory gateway keys add|list|revoke`.

The CLI module only calls `add_parser`; the commands' work happens here:
    gateway             -> settings (VF_* + flags) -> `Gateway` + `build_app` (API port) and
                           the ops listener (VF_GATEWAY_OPS_PORT): consumers.gateway.ops
    gateway keys add    -> `keys.add_key` (hash + scopes appended to VF_GATEWAY_KEYS_FILE)
                           -> the key printed once on stdout, the file and tenant on stderr
                           -> a key.add audit event (below)
    gateway keys list   -> key id, tenant, scopes, limits, created, revoked: never a key or
                           its full hash
    gateway keys revoke -> `keys.revoke_key` (the line gets revoked_at; running gateways
                           refuse the key within VF_GATEWAY_KEYS_RELOAD_S) -> key.revoke event
The key change is made first, then its audit event is produced to tts.audit
(consumers.clients.audit). When Kafka cannot be reached the change stands (a revocation
must never wait on a broker), the command says so on stderr, prints the event as JSON for the
record, and exits 0; `--no-audit` skips the attempt (an offline machine).
Heavy imports (starlette, aiokafka, uvicorn) happen inside the commands, not at CLI start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

from consumers.settings import Settings


def settings_from(args: argparse.Namespace) -> Settings:
    def flag(name: str) -> object:
        return getattr(args, name, None)
    return Settings.from_env().with_overrides(
        kafka={"bootstrap": flag("bootstrap"), "topic_prefix": flag("topic_prefix")},
        store={"endpoint": flag("s3_endpoint"), "bucket": flag("bucket")},
        gateway={"port": flag("port"), "ops_port": flag("ops_port"),
                 "keys_file": flag("keys_file")})


def cmd_gateway(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if getattr(args, "gateway_action", None) == "keys":
        return {"add": keys_add, "list": keys_list, "revoke": keys_revoke}[args.keys_action](
            settings, args)
    return serve(settings, args.log_format)


def keys_add(settings: Settings, args: argparse.Namespace) -> int:
    from consumers.gateway.keys import DEFAULT_SCOPES, add_key, key_id, parse_scopes

    path = settings.gateway.keys_path()
    rate = args.rate if args.rate is not None else settings.gateway.default_rate
    streams = args.streams if args.streams is not None else settings.gateway.default_streams
    try:
        scopes = parse_scopes(args.scopes) if args.scopes is not None else DEFAULT_SCOPES
    except ValueError as exc:
        print(f"error: --scopes: {exc}", file=sys.stderr)
        return 2
    quota = args.monthly_audio_s
    key = add_key(path, args.tenant, rate=rate, streams=streams, scopes=scopes,
                  monthly_audio_s=quota)
    kid = key_id(key)
    cap = f", {quota:g} audio s a month" if quota is not None else ""
    print(f"key {kid} for tenant {args.tenant} (scopes {','.join(sorted(scopes))}; rate "
          f"{rate:g}/s, {streams} streams{cap}) added to {path}; it is shown only now:",
          file=sys.stderr)
    print(key)
    _audit(settings, args, args.tenant, "key.add", kid)
    return 0


def keys_list(settings: Settings, args: argparse.Namespace) -> int:
    from consumers.gateway.keys import SCOPES, list_keys

    entries = list_keys(settings.gateway.keys_path())
    print(f"{'KEY ID':<12}  {'TENANT':<16} {'SCOPES':<32} {'LIMITS':<16} {'CREATED':<25} "
          "REVOKED")
    for e in entries:
        if e.revoked_at is not None and not args.all:
            continue
        scopes = ",".join(s for s in SCOPES if s in e.tenant.scopes) + (
            " (legacy)" if e.legacy else "")
        limits = f"{e.tenant.rate:g}/s {e.tenant.streams}str"
        print(f"{e.key_id:<12}  {e.tenant.name:<16} {scopes:<32} {limits:<16} "
              f"{e.created_at or '-':<25} {e.revoked_at or '-'}")
    return 0


def keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from consumers.gateway.keys import UnknownKey, revoke_key

    path = settings.gateway.keys_path()
    try:
        entry, now = revoke_key(path, args.key_id)
    except UnknownKey as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not now:
        print(f"key {entry.key_id} of tenant {entry.tenant.name} was already revoked at "
              f"{entry.revoked_at}", file=sys.stderr)
        return 0
    print(f"key {entry.key_id} of tenant {entry.tenant.name} revoked in {path}; running "
          f"gateways refuse it within {settings.gateway.keys_reload_s:g} s of reading this "
          "file (update the mounted Secret in a cluster)", file=sys.stderr)
    _audit(settings, args, entry.tenant.name, "key.revoke", entry.key_id)
    return 0


def _audit(settings: Settings, args: argparse.Namespace, tenant: str, action: str,
           obj: str) -> None:
    if args.no_audit:
        return
    from consumers.clients.audit import cli_event, send_event
    from topics.events import encode

    event = cli_event(tenant, action, obj)
    try:
        partition, offset = asyncio.run(send_event(settings, event,
                                                   timeout_s=args.audit_timeout))
    except Exception as exc:  # the change stands; see the module docstring
        print(f"warning: the {action} audit event was not written to tts.audit "
              f"({type(exc).__name__}: {exc}); the change is made. The event, to keep:\n"
              f"{encode(event).decode()}", file=sys.stderr)
        return
    print(f"audit: {action} {obj} on {settings.kafka.topic_prefix}tts.audit[{partition}] "
          f"offset {offset}", file=sys.stderr)


def serve(settings: Settings, log_format: str = "json") -> int:
    from consumers import logs
    from consumers.gateway import ops
    from consumers.gateway.app import build_app
    from consumers.gateway.runtime import Gateway

    logs.configure(log_format)
    gateway = Gateway(settings)
    asyncio.run(ops.serve(gateway, build_app(gateway)))
    return 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser],
                                          argparse.ArgumentParser]) -> None:
    gateway = common(sub.add_parser(
        "gateway", help="HTTP gateway: OpenAI speech API, voices and jobs (docs/gateway.md)",
        description="Without a subcommand: serve the API on VF_GATEWAY_PORT (default 8080) "
                    "and /healthz, /readyz, /metrics on VF_GATEWAY_OPS_PORT (default 9110)."))
    gateway.add_argument("--port", type=int, help="API port (VF_GATEWAY_PORT, default 8080)")
    gateway.add_argument("--ops-port", type=int, help="/healthz, /readyz, /metrics port "
                                                      "(VF_GATEWAY_OPS_PORT, default 9110)")
    gateway.add_argument("--keys-file", help="API key hashes (VF_GATEWAY_KEYS_FILE, default "
                                             "<state dir>/gateway-keys)")
    gateway.add_argument("--log-format", choices=["json", "text"], default="json")
    gsub = gateway.add_subparsers(dest="gateway_action")
    keys = gsub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_action",
                                                                          required=True)
    add = keys.add_parser("add", help="create a key for TENANT: printed once, stored hashed")
    add.add_argument("tenant")
    add.add_argument("--scopes", help="comma-separated, of speech, voices:write, jobs, admin "
                                      "(default speech,voices:write,jobs)")
    add.add_argument("--rate", type=float, help="requests a second (VF_GATEWAY_DEFAULT_RATE)")
    add.add_argument("--streams", type=int,
                     help="concurrent speech requests (VF_GATEWAY_DEFAULT_STREAMS)")
    listing = keys.add_parser("list", help="key id, tenant, scopes, limits, created, revoked "
                                           "(never a key or its hash)")
    listing.add_argument("--all", action="store_true", help="revoked keys too")
    revoke = keys.add_parser("revoke", help="revoke a key by its id (keys list)")
    revoke.add_argument("key_id", help="the key id: 12 hex digits, or more of its hash")
    for parser in (add, revoke):
        parser.add_argument("--no-audit", action="store_true",
                            help="do not try to write the audit event to tts.audit")
        parser.add_argument("--audit-timeout", type=float, default=15.0,
                            help="seconds to wait for Kafka to take the audit event")
    add.add_argument("--monthly-audio-s", type=float,
                     help="quota: audio seconds a UTC month, then 429 quota_exceeded "
                          "(docs/usage.md); default: none")
    gateway.set_defaults(func=cmd_gateway)
