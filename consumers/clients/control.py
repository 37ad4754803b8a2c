"""`voicefactory cancel`: one tts.control command, produced and acknowledged.

    --request ID | --job ID [--reason TEXT] --topics.control.cancel (checked: exactly one
    target, IDs in the object-key charset; InvalidControl otherwise) --> tts.control, key =
    the ID, acks=all --> every worker's ControlReader (consumers/worker/cancellation.py)

Exit codes as elsewhere in the CLI: 0 the command is on the topic, 1 the broker did not take
it, 2 the command itself is unusable (a bad ID).
"""

from __future__ import annotations

import sys
from typing import TextIO

from aiokafka.errors import KafkaError

from consumers.kafka import make_producer
from consumers.settings import Settings
from pipeline.answers import now_iso
from topics.control import InvalidControl, cancel, control_key
from topics.events import ControlCommand, encode
from topics.specs import topic_names


async def send_cancel(settings: Settings, command: ControlCommand) -> tuple[int, int]:
    """Produce `command` to tts.control; its (partition, offset) once acknowledged."""
    topic = topic_names(settings.kafka.topic_prefix).control
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, encode(command), key=control_key(command))
    finally:
        await producer.stop()
    return meta.partition, meta.offset


async def cancel_command(settings: Settings, *, request_id: str | None, job_id: str | None,
                         reason: str | None, out: TextIO | None = None,
                         err: TextIO | None = None, tenant: str | None = None) -> int:
    # Streams looked up per call, not bound at import: a redirected sys.stderr is honoured.
    out, err = out or sys.stdout, err or sys.stderr
    try:
        command = cancel(request_id=request_id, job_id=job_id, reason=reason,
                         requested_at=now_iso(), tenant=tenant)
    except (InvalidControl, ValueError) as exc:  # ValueError: a tenant unfit for a key
        print(f"error: {exc}", file=err)
        return 2
    try:
        partition, offset = await send_cancel(settings, command)
    except KafkaError as exc:
        print(f"error: the cancel was not produced: {exc}", file=err)
        return 1
    target = f"request {request_id}" if request_id is not None else f"job {job_id}"
    print(f"cancel of {target} sent ({topic_names(settings.kafka.topic_prefix).control}"
          f"[{partition}] offset {offset}); queued lines are answered `cancelled`", file=out)
    return 0
