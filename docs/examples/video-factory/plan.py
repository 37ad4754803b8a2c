"""A minimal downstream consumer: read finished jobs from tts.jobs, print an assembly plan.

This is what a video-assembly service would do with a `tts.job.v1` event: lay each clip on
the edit timeline at its `start_s`, attach the subtitles, or take the whole track. It uses
only aiokafka and the JSON contract (docs/contract.md), not VoiceFactory's own code.

    python docs/examples/video-factory/plan.py --from-beginning --job night-shift-ep12

A job keeps its ID across revisions, one event per `version` (absent: 1): the highest one is
the current cut; a clip whose `version` is lower was carried over unchanged (same audio
object), so an editor only has to re-place the others.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer


def plan(job: dict[str, Any]) -> str:
    """The assembly plan of one job event, as text."""
    clips = {c["index"]: c for c in job.get("clips", [])}
    version = job.get("version", 1)
    out = [f"job {job['job_id']} v{version}: {job['status']}, {len(clips)}/{job['total']} "
           f"clips, {job.get('duration_s', 0.0):.2f} s"]
    out.append(f"{'start':>8} {'end':>8}  {'voice':<10} {'audio':<48} text")
    for span in job.get("timeline", []):
        clip = clips[span["index"]]
        key = f"s3://{clip['audio']['bucket']}/{clip['audio']['key']}"
        kept = f" (as in v{clip['version']})" if clip.get("version", version) < version else ""
        out.append(f"{span['start_s']:8.3f} {span['end_s']:8.3f}  {clip['voice_id']:<10} "
                   f"{key:<48} {clip.get('text', '')}{kept}")
    for clip in clips.values():
        if clip["status"] != "succeeded":
            error = clip.get("error") or {}
            out.append(f"  line {clip['index']} {clip['status']}: {error.get('code', '?')} "
                       f"{error.get('message', '')} -> re-record or cut the scene")
    for index in job.get("missing", []):
        out.append(f"  line {index} never answered -> re-record or cut the scene")
    if job.get("subtitles"):
        out.append(f"subtitles: {job['subtitles']}")
    if job.get("track"):
        out.append(f"track: s3://{job['track']['bucket']}/{job['track']['key']} "
                   f"({job['track']['sample_rate']} Hz)")
    return "\n".join(out)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="tts.jobs")
    parser.add_argument("--group", help="consumer group (default: none, read and forget)")
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--job", help="stop after printing this job")
    parser.add_argument("--version", type=int,
                        help="with --job: wait for this version of it (default: the first seen)")
    args = parser.parse_args(argv)
    consumer = AIOKafkaConsumer(
        args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None)
    await consumer.start()
    try:
        async for record in consumer:
            job = json.loads(record.value or b"{}")
            if job.get("schema") != "tts.job.v1" or (args.job and job["job_id"] != args.job):
                continue
            if args.version and job.get("version", 1) != args.version:
                continue
            print(plan(job), flush=True)
            if args.job:
                return 0
    finally:
        await consumer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
