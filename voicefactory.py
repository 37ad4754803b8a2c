"""`voicefactory` command line: parses arguments, builds settings, calls into the packages.

Exit codes: 0 ok, 1 failure, 2 usage error. Nothing imports this module.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from bench import NAMES as BENCH_NAMES
from consumers.clients.usage import add_parser as add_usage_parser
from consumers.gateway.cli import add_parser as add_gateway_parser
from consumers.settings import Settings, find_checkout, state_dir
from topics.errors import VoiceFactoryError
from topics.tenancy import DEFAULT_TENANT, check_tenant, record_tenant
from topics.validation import VOICE_ID_MAX, check_id

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _tenant(text: str) -> str:
    """--tenant: a name fit for object keys (topics/tenancy.py), else a usage error."""
    try:
        return check_tenant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _voice_id(text: str) -> str:
    """A voice ID argument: the contract's ID rules (no paths), else a usage error."""
    try:
        return check_id("voice_id", text, VOICE_ID_MAX)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings(args: argparse.Namespace) -> Settings:
    """VF_* variables, then the flags this command has (a flag not given changes nothing)."""
    def flag(name: str) -> object:  # None: the command has no such flag or it was not given
        return getattr(args, name, None)
    # Groups are prefixed after --topic-prefix is applied, so the flag prefixes them too.
    return Settings.from_env(prefix_groups=False).with_overrides(
        kafka={"bootstrap": flag("bootstrap"), "topic_prefix": flag("topic_prefix")},
        store={"endpoint": flag("s3_endpoint"), "bucket": flag("bucket")},
        engine={"name": flag("engine")},
        worker={"max_inflight": flag("max_inflight"), "max_batch": flag("max_batch"),
                "instance_id": flag("instance_id"), "metrics_port": flag("metrics_port"),
                "stuck_partition_seconds": flag("stuck_partition_seconds")},
    ).with_prefixed_groups(os.environ)


def cmd_dev(args: argparse.Namespace) -> int:
    if args.cluster and args.kafka_tmpfs:
        print("--kafka-tmpfs is for the one-node stack, not --cluster", file=sys.stderr)
        return EXIT_USAGE
    if args.cluster:
        return _dev_cluster(args)
    from deploy.local import stack

    if args.action == "up":
        stack.up(kafka_tmpfs=args.kafka_tmpfs)
    elif args.action == "down":
        stack.down()
    elif args.action == "status":
        return EXIT_OK if stack.status() else EXIT_FAIL
    else:
        print("\n".join(stack.env_lines()))
    return EXIT_OK


def _dev_cluster(args: argparse.Namespace) -> int:
    from deploy.local import cluster

    if args.action == "up":
        cluster.up()
    elif args.action == "down":
        cluster.down()
    elif args.action == "status":
        return EXIT_OK if cluster.status() else EXIT_FAIL
    else:
        print("\n".join(cluster.env_lines(args.role)))
    return EXIT_OK


def cmd_topics(args: argparse.Namespace) -> int:
    from consumers.clients.topics import topics_command

    if args.action == "grow" and not args.partitions:
        print("topics grow needs --partitions N (more than the request lanes have now)",
              file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(topics_command(_settings(args), args.action,
                                      replication_factor=args.replication_factor,
                                      min_insync_replicas=args.min_insync_replicas,
                                      partitions=args.partitions, lanes=args.lanes))


def cmd_worker(args: argparse.Namespace) -> int:
    from consumers import logs
    from consumers.wiring import build_worker

    logs.configure(args.log_format)
    worker = build_worker(_settings(args), load=False).worker

    async def run() -> None:
        worker.install_signal_handlers()
        await worker.run()

    asyncio.run(run())
    if worker.refused:  # Kafka denied a fetch mid-run: the worker drained and stopped
        print(f"error: {worker.refused}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cmd_voices(args: argparse.Namespace) -> int:
    if args.action == "check":
        return _voices_check(Path(args.file))
    from consumers.wiring import make_store

    settings = _settings(args)
    store = make_store(settings.store)
    if args.action == "list":
        from pipeline.voices import list_voices

        voices = list_voices(store, tenant=args.tenant)
        print(f"{'voice':<24} {'language':<9} {'sha256':<16} {'created':<25} transcript")
        for v in voices:
            print(f"{v.voice_id:<24} {v.language or '-':<9} {v.sha256[:16]:<16} "
                  f"{v.created_at:<25} {(v.prompt_text or '')[:40]}")
        print(f"{len(voices)} voice(s)", file=sys.stderr)
        return EXIT_OK
    from consumers.clients.produce import publish_voice, publish_voice_tombstone

    if args.action == "rm":
        from pipeline.voices import remove_voice

        removed = remove_voice(store, args.voice_id, tenant=args.tenant)
        asyncio.run(publish_voice_tombstone(settings, args.voice_id, tenant=args.tenant))
        print(f"removed {args.voice_id}: {removed} object(s) deleted, tombstone produced")
        return EXIT_OK
    from pipeline.consent import register_with_consent

    event = register_with_consent(
        store, voice_id=args.voice_id, reference=Path(args.file).read_bytes(),
        prompt_text=args.text, language=args.language,
        recording=Path(args.consent).read_bytes(), speaker=args.speaker or args.voice_id,
        statement=args.consent_statement, threshold=settings.gateway.consent_threshold,
        tenant=args.tenant)
    asyncio.run(publish_voice(settings, event))
    assert event.consent is not None
    print(f"registered {event.voice_id}: {event.reference} sha256={event.sha256[:16]} "
          f"consent {event.consent.id} (similarity {event.consent.similarity:.3f})")
    return EXIT_OK


def _voices_check(path: Path) -> int:
    from pipeline.reference import check_reference

    report = check_reference(path.read_bytes())
    print(f"{'rule':<16} {'':<5} {'measured':<38} limit")
    for c in report.checks:
        mark = "ok" if c.ok else ("warn" if c.advisory else "FAIL")
        print(f"{c.rule:<16} {mark:<5} {c.measured:<38} {c.limit}")
    if report.audio is not None:
        print(f"{'duration':<16} {'':<5} {report.audio.duration_s:.2f} s in all")
    for problem in report.problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    print("verdict: " + ("ok" if report.ok else "rejected"))
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_say(args: argparse.Namespace) -> int:
    from consumers.clients.produce import new_request_id
    from consumers.clients.say import say
    from topics.events import SynthesisRequest

    request = SynthesisRequest(request_id=args.request_id or new_request_id(),
                               voice_id=args.voice, text=args.text, language=args.language,
                               format=args.format, instruct=args.instruct, stream=args.stream,
                               tenant=record_tenant(args.tenant))
    return say(_settings(args), request, out=args.out, timeout_s=args.timeout,
               interactive=args.interactive)


def cmd_submit(args: argparse.Namespace) -> int:
    from consumers.clients.produce import read_jsonl, submit

    settings = _settings(args)
    requests = list(read_jsonl(Path(args.file)))
    if args.tenant is not None:  # given: every line is the tenant's; else each line's own
        requests = [msgspec.structs.replace(r, tenant=record_tenant(args.tenant))
                    for r in requests]
    count = asyncio.run(submit(settings, requests, interactive=args.interactive))
    print(f"submitted {count} requests")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    from consumers.clients.control import cancel_command

    return asyncio.run(cancel_command(_settings(args), request_id=args.request,
                                      job_id=args.job, reason=args.reason,
                                      tenant=args.tenant))


def cmd_bench(args: argparse.Namespace) -> int:
    import logging

    if args.suite == "consent":
        return _bench_consent(args)
    if args.suite != "assignors":
        from bench.runner import main as run_benchmarks
        from deploy.local import stack

        work_dir = Path(args.work_dir) if args.work_dir else state_dir() / "bench"
        only = [args.suite] if args.suite in ("peers", "route", "fuzz") else args.only
        return run_benchmarks(_settings(args), stack=stack, quick=args.quick, only=only,
                              json_path=Path(args.json) if args.json else None,
                              plots_dir=Path(args.plots_dir) if args.plots_dir
                              else _default_plots_dir(work_dir),
                              work_dir=work_dir, out=sys.stdout)
    from bench.assignors import run_all, table

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # rebalances are the point here
    print("measuring partition movement per assignor on the real broker ...", file=sys.stderr)
    print(table(asyncio.run(run_all(_settings(args)))))
    return EXIT_OK


def _bench_consent(args: argparse.Namespace) -> int:
    """The consent threshold's FAR/FRR on espeak-ng speakers: needs no stack."""
    import orjson

    from bench.consent import measure

    print("measuring speaker similarity of espeak-ng speakers (GE2E) ...", file=sys.stderr)
    outcome = measure(quick=args.quick)
    print(outcome.table)
    for note in outcome.notes:
        print(f"- {note}")
    print(orjson.dumps(outcome.figures).decode())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_bytes(orjson.dumps(outcome.figures, option=orjson.OPT_INDENT_2))
    return EXIT_OK


def _default_plots_dir(work_dir: Path) -> Path:
    """docs/img of the checkout the command runs in (the committed figures), else WORK_DIR."""
    checkout = find_checkout(Path.cwd())
    return checkout / "docs" / "img" if checkout is not None else work_dir / "img"


def cmd_demo(args: argparse.Namespace) -> int:
    from consumers.clients.demo import run_demo
    from deploy.local import stack

    stack.up()
    out_dir = Path(args.out_dir) if args.out_dir else state_dir() / "demo"
    return asyncio.run(run_demo(_settings(args), out_dir))


def cmd_aggregator(args: argparse.Namespace) -> int:
    from consumers import logs
    from consumers.aggregator.app import declare_changelogs, run
    from consumers.kafka_access import refused_login
    from consumers.wiring import build_aggregator

    logs.configure(args.log_format)
    settings = _settings(args).with_overrides(aggregator={
        "port": args.port, "job_timeout_seconds": args.job_timeout, "job_gap_ms": args.gap_ms,
        "datadir": args.datadir})
    # faust reports a refused login or an untrusted CA as a traceback ending in "Unable to
    # bootstrap"; asked first, the reason is one line (as the worker and the gateway say it).
    refused = asyncio.run(refused_login(settings.kafka))
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_FAIL
    aggregator = build_aggregator(settings)
    created = asyncio.run(declare_changelogs(aggregator))
    if created:
        print(f"created the changelog topics {', '.join(created)}", file=sys.stderr)
    return run(aggregator)


def cmd_job(args: argparse.Namespace) -> int:
    from consumers.clients.jobs import UnknownVoices, run_command
    from consumers.clients.revisions import RevisionError
    from consumers.clients.scripts import ScriptError, load_script

    try:
        script = load_script(Path(args.script), concat=True if args.concat else None)
        return run_command(_settings(args), script, wait=args.wait, timeout_s=args.timeout,
                           job_timeout_s=args.job_timeout, tenant=args.tenant)
    except (ScriptError, UnknownVoices, RevisionError) as exc:  # nothing was produced
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _indices(text: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected indices like 3,7, got {text!r}") from None


def cmd_job_rerun(args: argparse.Namespace) -> int:
    from consumers.clients.jobs import UnknownVoices, run_submission, submit_rerun
    from consumers.clients.revisions import RevisionError
    from consumers.clients.scripts import ScriptError
    from consumers.wiring import make_store

    if not args.failed and not args.lines:
        print("error: say what to re-run: --failed and/or --lines 3,7", file=sys.stderr)
        return EXIT_USAGE
    settings = _settings(args)
    try:
        submission = submit_rerun(make_store(settings.store), args.job_id, failed=args.failed,
                                  lines=args.lines or frozenset(), tenant=args.tenant)
    except (ScriptError, UnknownVoices, RevisionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_submission(settings, submission, wait=args.wait, timeout_s=args.timeout,
                          job_timeout_s=args.job_timeout)


def cmd_results(args: argparse.Namespace) -> int:
    from consumers.clients.tail import tail_results

    asyncio.run(tail_results(_settings(args), from_beginning=args.from_beginning,
                             out=sys.stdout, limit=args.limit))
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from consumers.clients.audit import tail_audit

    asyncio.run(tail_audit(_settings(args), from_beginning=args.from_beginning,
                           out=sys.stdout, tenant=args.tenant, limit=args.limit))
    return EXIT_OK


def cmd_fleet(args: argparse.Namespace) -> int:
    from consumers.clients import fleet

    settings = _settings(args)
    router, view = asyncio.run(fleet.read_fleet(settings))
    if args.action == "route":
        answer = fleet.explain_route(settings, router, args.voice_id, args.lane)
        fleet.write(answer, fleet.route_lines(answer), as_json=args.json, out=sys.stdout)
        return EXIT_OK
    shown = fleet.show(router, view)
    fleet.write(shown, fleet.show_lines(shown, settings), as_json=args.json, out=sys.stdout)
    return EXIT_OK if shown.workers else EXIT_FAIL


def cmd_dlq(args: argparse.Namespace) -> int:
    from consumers.clients.dlq import NotStored, stored_value
    from consumers.wiring import make_store

    store = make_store(_settings(args).store)
    try:
        value = stored_value(store, args.topic, args.partition, args.offset)
    except NotStored as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    Path(args.out).write_bytes(value.data)
    print(f"wrote {len(value.data)} bytes from {value.ref} to {args.out} "
          f"(sha256 {value.sha256})")
    return EXIT_OK


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

    def owned(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--tenant", type=_tenant, default=DEFAULT_TENANT,
                       help="the tenant whose voices, requests and jobs these are "
                            "(default: default)")
        return p

    dev = sub.add_parser("dev", help="local stack: Apache Kafka + S3 server on 127.0.0.1")
    dev.add_argument("action", choices=["up", "down", "status", "env"])
    dev.add_argument("--cluster", action="store_true",
                     help="the three-node SASL_SSL cluster on 127.0.0.1:19092-19094 (state in "
                          "<state dir>/cluster/) instead of the one-node stack")
    dev.add_argument("--role", default="admin",
                     choices=["admin", "gateway", "worker", "aggregator"],
                     help="env --cluster: whose credentials to print (default admin)")
    dev.add_argument("--kafka-tmpfs", action="store_true",
                     help="up: keep the broker's data in /dev/shm (lost when the machine "
                          "restarts), linked from <state dir>/kafka/data; later `up`s keep "
                          "it there. For benchmarks on a slow disk (docs/benchmarks.md)")
    dev.set_defaults(func=cmd_dev)

    topics = common(sub.add_parser("topics", help="create, verify or grow the contract's "
                                                  "topics"))
    topics.add_argument("action", choices=["create", "describe", "grow"],
                        help="create: the missing ones; describe: report drift; grow: a pair "
                             "of request lanes (--lanes) to --partitions")
    topics.add_argument("--partitions", type=int, default=None,
                        help="grow: the request lanes' new partition count")
    topics.add_argument("--lanes", choices=["plain", "shards"], default="plain",
                        help="grow: plain (tts.requests[.interactive], where a plain voice_id "
                             "key lands; default) or shards (tts.requests[.interactive].shards, "
                             "where routers send: the most workers the fleet feeds)")
    topics.add_argument("--replication-factor", type=int, default=None,
                        help="default: 3 on three or more brokers, else the broker count")
    topics.add_argument("--min-insync-replicas", type=int, default=None,
                        help="default: 2 on three or more brokers, else 1")
    topics.set_defaults(func=cmd_topics)

    worker = common(sub.add_parser("worker", help="run a synthesis worker (group vf-synth)"))
    worker.add_argument("--engine", help="engine name (VF_ENGINE), default espeak")
    worker.add_argument("--max-inflight", type=int,
                        help="engine calls at once for either lane (VF_MAX_INFLIGHT, default "
                             "2); the device runs these plus VF_INTERACTIVE_SLOTS "
                             "interactive-only calls (default 1): size GPU memory for the "
                             "sum, 3 by default")
    worker.add_argument("--max-batch", type=int,
                        help="most requests of one voice per engine call (VF_MAX_BATCH, default 8)")
    worker.add_argument("--instance-id",
                        help="static group member name (VF_INSTANCE_ID, default the host name)")
    worker.add_argument("--metrics-port", type=int,
                        help="/healthz, /readyz, /metrics port (VF_METRICS_PORT, default 9108; "
                             "-1 disables)")
    worker.add_argument("--stuck-partition-seconds", type=int,
                        help="a partition whose committed offset has not moved for this long "
                             "while records wait is stuck: vf_partitions_stuck, listed in "
                             "/readyz (VF_STUCK_PARTITION_SECONDS, default 120)")
    worker.add_argument("--log-format", choices=["json", "text"], default="json")
    worker.set_defaults(func=cmd_worker)

    fleet = sub.add_parser("fleet", help="the workers' statuses on tts.fleet, and where a "
                                         "voice's requests are routed")
    fsub = fleet.add_subparsers(dest="action", required=True)
    fshow = common(fsub.add_parser(
        "show", help="each worker's lanes: partitions, backlog, queued, running/slots, hot "
                     "voices, profile hit ratio, failed results (exit 1: no worker heard)"))
    froute = common(fsub.add_parser(
        "route", help="a voice's workers in routing order (its home first) and where its "
                      "next request goes now"))
    froute.add_argument("voice_id", type=_voice_id, metavar="VOICE_ID")
    froute.add_argument("--lane", choices=("batch", "interactive"), default="batch",
                        help="batch: jobs and `job run` (default); interactive: the "
                             "gateway's speech")
    for p in (fshow, froute):
        p.add_argument("--json", action="store_true", help="one JSON object instead of a "
                                                           "table")
    fleet.set_defaults(func=cmd_fleet)

    dlq = sub.add_parser("dlq", help="dead letters: get the original value of one that was "
                                     "too big to carry inline")
    dsub = dlq.add_subparsers(dest="action", required=True)
    get = common(dsub.add_parser("get", help="write the stored value of the dead-lettered "
                                             "record TOPIC/PARTITION/OFFSET (its value_ref)"))
    get.add_argument("topic", help="the original record's topic, as the DLQ record names it")
    get.add_argument("partition", type=int)
    get.add_argument("offset", type=int)
    get.add_argument("--out", required=True, help="file to write the bytes to")
    dlq.set_defaults(func=cmd_dlq)

    voices = sub.add_parser("voices", help="check, register, list and remove voices")
    vsub = voices.add_subparsers(dest="action", required=True)
    check = vsub.add_parser("check", help="validate a reference clip")
    check.add_argument("file")
    add = common(vsub.add_parser("add", help="validate, upload and register a voice"))
    add.add_argument("voice_id")
    add.add_argument("file")
    add.add_argument("--text", help="transcript of the reference (recommended)")
    add.add_argument("--language")
    owned(add)
    add.add_argument("--consent", required=True, metavar="FILE",
                     help="the speaker saying the consent statement; must be the reference's "
                          "speaker (VF_CONSENT_THRESHOLD, docs/voices.md)")
    add.add_argument("--consent-statement", help="the words said in the consent recording "
                     "(default: the standard statement naming the speaker)")
    add.add_argument("--speaker", help="the speaker's name (default: the voice ID)")
    owned(common(vsub.add_parser("list", help="list registered voices")))
    rm = common(vsub.add_parser("rm", help="delete a voice: its objects and a tombstone on "
                                           "tts.voices"))
    rm.add_argument("voice_id")
    owned(rm)
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
    interactive = "produce to tts.requests.interactive, the lane workers serve first"
    say.add_argument("--interactive", action="store_true", help=interactive)
    say.add_argument("--stream", action="store_true", help="stream: write audio chunks to --out "
                     "(WAV, or bare PCM for .raw/.pcm) as they arrive, print time to first chunk")
    owned(say)
    say.set_defaults(func=cmd_say)

    submit = common(sub.add_parser("submit", help="produce requests from a JSONL file"))
    submit.add_argument("file")
    submit.add_argument("--interactive", action="store_true", help=interactive)
    submit.add_argument("--tenant", type=_tenant, help="the tenant every line belongs to "
                        "(default: each line's own `tenant`, absent: default)")
    submit.set_defaults(func=cmd_submit)

    cancel = common(sub.add_parser("cancel", help="cancel a request or a whole job (tts.control"
                                   "): lines not yet synthesized are answered `cancelled`"))
    target = cancel.add_mutually_exclusive_group(required=True)
    target.add_argument("--request", help="the request_id to cancel")
    target.add_argument("--job", help="the job ID whose lines to cancel")
    cancel.add_argument("--reason", help="why; echoed in each cancelled result's error")
    owned(cancel)
    cancel.set_defaults(func=cmd_cancel)

    bench = common(sub.add_parser("bench", help="benchmarks on the running stack"))
    bench.add_argument("suite", nargs="?",
                       choices=["all", "assignors", "peers", "route", "fuzz", "consent"],
                       default="all",
                       help=f"all (default): {', '.join(BENCH_NAMES)} "
                            "(docs/benchmarks.md); "
                            "assignors: partitions moved per assignment strategy; "
                            "peers: only nginx + model servers against the fleet; "
                            "route: only fleet routing (one narrator, one brand voice, "
                            "kill -9); fuzz: only the fuzz suite at bench size; "
                            "consent: the consent threshold's FAR/FRR (no stack needed)")
    bench.add_argument("--quick", action="store_true",
                       help="shorter durations and counts, same figures (`make bench`)")
    bench.add_argument("--json", help="write the figures as flat JSON keys to this file")
    bench.add_argument("--only", nargs="+", metavar="NAME",
                       choices=BENCH_NAMES,
                       help="run only these measurements")
    bench.add_argument("--plots-dir", help="PNG plots go here (default: docs/img of the "
                       "checkout run from, else WORK_DIR/img)")
    bench.add_argument("--work-dir", help="worker logs, py-spy profile, report.md, figures.json "
                       "(default: <state dir>/bench; VF_STATE_DIR, else the checkout's .vf/, "
                       "else ~/.local/state/voicefactory)")
    bench.set_defaults(func=cmd_bench)

    demo = common(sub.add_parser("demo", help="run the end-to-end demo on the local stack"))
    demo.add_argument("--out-dir", help="where the clips go (default: <state dir>/demo)")
    demo.set_defaults(func=cmd_demo)

    agg = common(sub.add_parser(
        "aggregator", help="collect a job's results into one tts.jobs event (faust-streaming)"))
    agg.add_argument("--port", type=int,
                     help="/healthz, /readyz, /metrics port (VF_AGGREGATOR_PORT, "
                          "default 9109; -1 off)")
    agg.add_argument("--job-timeout", type=int, help="close a job as partial after this many "
                     "seconds without a result (VF_JOB_TIMEOUT_SECONDS, default 600)")
    agg.add_argument("--gap-ms", type=int, help="silence between clips on the timeline "
                     "(VF_JOB_GAP_MS, default 300; a script's gap_ms wins)")
    agg.add_argument("--datadir", help="faust state folder (VF_AGGREGATOR_DATADIR, "
                     "default <state dir>/aggregator)")
    agg.add_argument("--log-format", choices=["json", "text"], default="json")
    agg.set_defaults(func=cmd_aggregator)

    job = sub.add_parser("job", help="video-factory jobs: a script in, ordered clips out")
    jsub = job.add_subparsers(dest="action", required=True)
    jrun = common(jsub.add_parser("run", help="produce one request per script line",
                                  description="SCRIPT is YAML or JSON: job_id and lines, each "
                                  "with voice, text and optional instruct, language, format "
                                  "(docs/jobs.md)."))
    jrun.add_argument("script")
    jrun.add_argument("--wait", action="store_true",
                      help="follow the results with a progress bar; exit 0 only when every "
                           "line succeeded")
    jrun.add_argument("--concat", action="store_true",
                      help="the aggregator also writes the whole job as one track")
    jrun.add_argument("--timeout", type=float, default=600.0,
                      help="with --wait, give up after this many seconds (default 600)")
    jrun.add_argument("--job-timeout", type=float, default=15.0,
                      help="with --wait, seconds to wait for the job event after the last "
                           "result (default 15; 0 skips)")
    owned(jrun)
    jrun.set_defaults(func=cmd_job)
    jrerun = common(jsub.add_parser(
        "rerun", help="make the next version of a finished job from some of its lines",
        description="Re-produce lines of the latest finished version of JOB as a new version "
                    "(the other lines are carried over unchanged; docs/jobs.md)."))
    jrerun.add_argument("job_id", metavar="JOB")
    jrerun.add_argument("--failed", action="store_true",
                        help="the lines without audio (failed, rejected, expired, "
                             "cancelled or missing)")
    jrerun.add_argument("--lines", type=_indices,
                        help="these line indices, comma-separated (0-based, as the job "
                             "event's clips[].index and job run's # column)")
    for flag, kwargs in (("--wait", {"action": "store_true", "help": "as job run --wait"}),
                         ("--timeout", {"type": float, "default": 600.0}),
                         ("--job-timeout", {"type": float, "default": 15.0})):
        jrerun.add_argument(flag, **kwargs)
    owned(jrerun)
    jrerun.set_defaults(func=cmd_job_rerun)

    results = sub.add_parser("results", help="follow tts.results")
    rsub = results.add_subparsers(dest="action", required=True)
    tail = common(rsub.add_parser("tail", help="print one line per result as they arrive"))
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("--limit", type=int, help="stop after this many results")
    results.set_defaults(func=cmd_results)

    audit = sub.add_parser("audit", help="follow tts.audit: what tenants' keys did")
    asub = audit.add_subparsers(dest="action", required=True)
    atail = common(asub.add_parser("tail", help="print one line per audit event as they "
                                                "arrive (voice, consent, key and job actions)"))
    atail.add_argument("--tenant", help="only this tenant's events")
    atail.add_argument("--from-beginning", action="store_true",
                       help="from the oldest kept event (the topic keeps 365 days)")
    atail.add_argument("--limit", type=int, help="stop after this many events")
    audit.set_defaults(func=cmd_audit)
    add_gateway_parser(sub, common)
    add_usage_parser(sub, common)
    return parser


def _kafka_reason(exc: BaseException, args: argparse.Namespace) -> str | None:
    """A refused login, an untrusted certificate or a missing ACL, in one line naming the
    principal and the topic or group (consumers/kafka_access.py); None for other errors."""
    from aiokafka.errors import KafkaError

    if not isinstance(exc, KafkaError):
        return None
    from consumers.kafka_access import explain_or_diagnose

    try:
        return explain_or_diagnose(exc, _settings(args).kafka)
    except Exception:  # the original error is the one to report
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (VoiceFactoryError, OSError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"error: {_kafka_reason(exc, args) or exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return EXIT_FAIL
    return code


if __name__ == "__main__":
    sys.exit(main())
