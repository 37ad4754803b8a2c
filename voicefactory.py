"""`voicefactory` command line: parses arguments, builds settings, calls into the packages.

Exit codes: 0 ok, 1 failure, 2 usage error. Nothing imports this module.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from topics.config import Settings
from topics.errors import VoiceFactoryError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env().with_overrides(
        kafka_bootstrap=getattr(args, "bootstrap", None),
        topic_prefix=getattr(args, "topic_prefix", None),
        s3_endpoint=getattr(args, "s3_endpoint", None),
        s3_bucket=getattr(args, "bucket", None),
        engine=getattr(args, "engine", None),
        max_inflight=getattr(args, "max_inflight", None),
        max_batch=getattr(args, "max_batch", None),
        instance_id=getattr(args, "instance_id", None),
        metrics_port=getattr(args, "metrics_port", None),
    )


def cmd_dev(args: argparse.Namespace) -> int:
    from deploy.local import stack

    if args.action == "up":
        stack.up()
    elif args.action == "down":
        stack.down()
    elif args.action == "status":
        return EXIT_OK if stack.status() else EXIT_FAIL
    else:
        print("\n".join(stack.env_lines()))
    return EXIT_OK


def cmd_topics(args: argparse.Namespace) -> int:
    from topics.admin import admin_client, create_topics, describe_topics, drift

    settings = _settings(args)

    async def run() -> int:
        from consumers.kafka import security_kwargs

        admin = admin_client(settings.kafka_bootstrap, **security_kwargs(settings))
        await admin.start()
        try:
            if args.action == "create":
                created = await create_topics(admin, prefix=settings.topic_prefix,
                                              replication_factor=args.replication_factor,
                                              min_insync_replicas=args.min_insync_replicas)
                print(f"created: {', '.join(created) or 'nothing (all present)'}")
            states = await describe_topics(admin, prefix=settings.topic_prefix)
            for s in states:
                print(f"{s.name:24} partitions={s.partitions:<3} rf={s.replication_factor} "
                      f"cleanup={s.configs.get('cleanup.policy', '-')} "
                      f"retention.ms={s.configs.get('retention.ms', '-')}" if s.exists
                      else f"{s.name:24} MISSING")
            problems = drift(states, prefix=settings.topic_prefix,
                             replication_factor=args.replication_factor,
                             min_insync_replicas=args.min_insync_replicas)
            for p in problems:
                print(f"drift: {p}", file=sys.stderr)
            return EXIT_FAIL if problems else EXIT_OK
        finally:
            await admin.close()

    return asyncio.run(run())


def cmd_worker(args: argparse.Namespace) -> int:
    from consumers import logs
    from consumers.runtime import build_runtime
    from consumers.worker import SynthesisWorker

    logs.configure(args.log_format)
    settings = _settings(args)
    runtime = build_runtime(settings)

    async def run() -> None:
        worker = SynthesisWorker(settings=settings, processor=runtime.processor,
                                 metrics=runtime.metrics)
        worker.install_signal_handlers()
        await worker.run()

    asyncio.run(run())
    return EXIT_OK


def cmd_voices(args: argparse.Namespace) -> int:
    from pipeline.reference import check_reference

    if args.action == "check":
        data = Path(args.file).read_bytes()
        report = check_reference(data)
        if report.audio is not None:
            print(f"sample rate   {report.audio.sample_rate} Hz")
            print(f"duration      {report.audio.duration_s:.2f} s")
            print(f"speech        {report.speech_s:.2f} s")
            print(f"peak          {report.peak_dbfs:.1f} dBFS")
            print(f"clipped       {report.clipped_ratio:.2%}")
        for problem in report.problems:
            print(f"FAIL  {problem}")
        print("verdict       " + ("ok" if report.ok else "rejected"))
        return EXIT_OK if report.ok else EXIT_FAIL
    from consumers.runtime import make_store

    settings = _settings(args)
    store = make_store(settings)
    if args.action == "list":
        for key in store.list_prefix("voices/"):
            if key.endswith("/voice.json"):
                print(key.split("/")[1])
        return EXIT_OK
    from consumers.client import publish_voice
    from pipeline.voices import register_voice

    event = register_voice(store, voice_id=args.voice_id, reference=Path(args.file).read_bytes(),
                           prompt_text=args.text, language=args.language)
    asyncio.run(publish_voice(settings, event))
    print(f"registered {event.voice_id}: {event.reference} sha256={event.sha256[:16]}")
    return EXIT_OK


def cmd_say(args: argparse.Namespace) -> int:
    from consumers.client import new_request_id, request_and_wait
    from consumers.runtime import make_store
    from topics.events import SynthesisRequest

    settings = _settings(args)
    request = SynthesisRequest(request_id=args.request_id or new_request_id(),
                               voice_id=args.voice, text=args.text, language=args.language,
                               format=args.format, instruct=args.instruct)
    [result] = asyncio.run(request_and_wait(settings, [request], timeout_s=args.timeout)).values()
    if result.status != "succeeded" or result.audio is None:
        err = result.error
        print(f"{result.status}: {err.code if err else ''}: {err.message if err else ''}",
              file=sys.stderr)
        return EXIT_FAIL
    out = Path(args.out or f"{request.request_id}.{request.format}")
    out.write_bytes(make_store(settings).get(result.audio.key) or b"")
    print(f"{result.audio.duration_s:.2f} s -> {out} (s3://{result.audio.bucket}/"
          f"{result.audio.key})")
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    from consumers.client import read_jsonl, submit

    count = asyncio.run(submit(_settings(args), list(read_jsonl(Path(args.file)))))
    print(f"submitted {count} requests")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    import logging

    from consumers.assignor_bench import run_all, table

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # rebalances are the point here
    print("measuring partition movement per assignor on the real broker ...", file=sys.stderr)
    print(table(asyncio.run(run_all(_settings(args)))))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from consumers.demo import run_demo
    from deploy.local import stack

    stack.up()
    return asyncio.run(run_demo(_settings(args), Path(args.out_dir)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voicefactory",
        description="Kafka-native voice-cloning TTS: local stack, topics, worker, voices, "
                    "clients and benchmarks. Settings come from VF_* variables (README).",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage error.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--bootstrap", help="Kafka bootstrap servers (VF_KAFKA_BOOTSTRAP)")
        p.add_argument("--topic-prefix", help="topic name prefix (VF_TOPIC_PREFIX)")
        p.add_argument("--s3-endpoint", help="S3 endpoint URL (VF_S3_ENDPOINT)")
        p.add_argument("--bucket", help="bucket (VF_S3_BUCKET)")
        return p

    dev = sub.add_parser("dev", help="local stack: Apache Kafka + S3 server on 127.0.0.1")
    dev.add_argument("action", choices=["up", "down", "status", "env"])
    dev.set_defaults(func=cmd_dev)

    topics = common(sub.add_parser("topics", help="create or verify the contract's topics"))
    topics.add_argument("action", choices=["create", "describe"])
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument("--min-insync-replicas", type=int, default=None)
    topics.set_defaults(func=cmd_topics)

    worker = common(sub.add_parser("worker", help="run a synthesis worker (group vf-synth)"))
    worker.add_argument("--engine", help="engine name (VF_ENGINE), default espeak")
    worker.add_argument("--max-inflight", type=int,
                        help="concurrent engine calls (VF_MAX_INFLIGHT, default 2)")
    worker.add_argument("--max-batch", type=int,
                        help="most requests of one voice per engine call (VF_MAX_BATCH, default 8)")
    worker.add_argument("--instance-id",
                        help="static group member name (VF_INSTANCE_ID, default the host name)")
    worker.add_argument("--metrics-port", type=int,
                        help="/healthz, /readyz, /metrics port (VF_METRICS_PORT, default 9108; "
                             "-1 disables)")
    worker.add_argument("--log-format", choices=["json", "text"], default="json")
    worker.set_defaults(func=cmd_worker)

    voices = sub.add_parser("voices", help="check, register and list voices")
    vsub = voices.add_subparsers(dest="action", required=True)
    check = vsub.add_parser("check", help="validate a reference clip")
    check.add_argument("file")
    add = common(vsub.add_parser("add", help="validate, upload and register a voice"))
    add.add_argument("voice_id")
    add.add_argument("file")
    add.add_argument("--text", help="transcript of the reference (recommended)")
    add.add_argument("--language")
    common(vsub.add_parser("list", help="list registered voices"))
    voices.set_defaults(func=cmd_voices)

    say = common(sub.add_parser("say", help="synthesize one line and download it"))
    say.add_argument("text")
    say.add_argument("--voice", required=True)
    say.add_argument("--language")
    say.add_argument("--instruct")
    say.add_argument("--format", default="wav", choices=["wav", "flac", "mp3", "opus"])
    say.add_argument("--out")
    say.add_argument("--request-id")
    say.add_argument("--timeout", type=float, default=120.0)
    say.set_defaults(func=cmd_say)

    submit = common(sub.add_parser("submit", help="produce requests from a JSONL file"))
    submit.add_argument("file")
    submit.set_defaults(func=cmd_submit)

    bench = common(sub.add_parser("bench", help="benchmarks on the running stack"))
    bench.add_argument("suite", choices=["assignors"],
                       help="assignors: partitions moved per assignment strategy")
    bench.set_defaults(func=cmd_bench)

    demo = common(sub.add_parser("demo", help="run the end-to-end demo on the local stack"))
    demo.add_argument("--out-dir", default=".vf/demo")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except VoiceFactoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except (OSError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return EXIT_FAIL
    return code


if __name__ == "__main__":
    sys.exit(main())
