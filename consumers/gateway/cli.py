"""`voicefactory gateway [--port N]` and `voicefactory gateway keys add TENANT`.

The CLI module only calls `add_parser`; the commands' work happens here:
    gateway           -> settings (VF_* + flags) -> `Gateway` + `build_app` -> uvicorn
    gateway keys add  -> `keys.add_key` (hash appended to VF_GATEWAY_KEYS_FILE) -> the key
                         printed once on stdout, the file and tenant on stderr
Heavy imports (starlette, aiokafka, uvicorn) happen inside the commands, not at CLI start.
"""

from __future__ import annotations

import argparse
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
        gateway={"port": flag("port"), "keys_file": flag("keys_file")})


def cmd_gateway(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if getattr(args, "gateway_action", None) == "keys":
        from consumers.gateway.keys import add_key

        path = settings.gateway.keys_path()
        rate = args.rate if args.rate is not None else settings.gateway.default_rate
        streams = args.streams if args.streams is not None else settings.gateway.default_streams
        quota = args.monthly_audio_s
        key = add_key(path, args.tenant, rate=rate, streams=streams, monthly_audio_s=quota)
        cap = f", {quota:g} audio s a month" if quota is not None else ""
        print(f"key for tenant {args.tenant} (rate {rate:g}/s, {streams} streams{cap}) added "
              f"to {path}; it is shown only now:", file=sys.stderr)
        print(key)
        return 0
    return serve(settings, args.log_format)


def serve(settings: Settings, log_format: str = "json") -> int:
    import uvicorn

    from consumers import logs
    from consumers.gateway.app import build_app
    from consumers.gateway.runtime import Gateway

    logs.configure(log_format)
    app = build_app(Gateway(settings))
    # No access log: our own metrics count requests, and a log line per request is noise.
    config = uvicorn.Config(app, host=settings.gateway.host, port=settings.gateway.port,
                            log_config=None, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=30)
    uvicorn.Server(config).run()
    return 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser],
                                          argparse.ArgumentParser]) -> None:
    gateway = common(sub.add_parser(
        "gateway", help="HTTP gateway: OpenAI speech API, voices and jobs (docs/gateway.md)",
        description="Without a subcommand: serve HTTP on VF_GATEWAY_PORT (default 8080)."))
    gateway.add_argument("--port", type=int, help="listen port (VF_GATEWAY_PORT, default 8080)")
    gateway.add_argument("--keys-file", help="API key hashes (VF_GATEWAY_KEYS_FILE, default "
                                             "<state dir>/gateway-keys)")
    gateway.add_argument("--log-format", choices=["json", "text"], default="json")
    gsub = gateway.add_subparsers(dest="gateway_action")
    keys = gsub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_action",
                                                                          required=True)
    add = keys.add_parser("add", help="create a key for TENANT: printed once, stored hashed")
    add.add_argument("tenant")
    add.add_argument("--rate", type=float, help="requests a second (VF_GATEWAY_DEFAULT_RATE)")
    add.add_argument("--streams", type=int,
                     help="concurrent speech requests (VF_GATEWAY_DEFAULT_STREAMS)")
    add.add_argument("--monthly-audio-s", type=float,
                     help="quota: audio seconds a UTC month, then 429 quota_exceeded "
                          "(docs/usage.md); default: none")
    gateway.set_defaults(func=cmd_gateway)
