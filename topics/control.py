"""tts.control commands (DESIGN.md, "Lanes"): build and check a cancel before it is produced
or acted on.

A worker or the aggregator reads raw bytes from tts.control -> `decode_control` -> a checked
`ControlCommand` (exactly one target, IDs in the object-key charset) or `InvalidControl`,
which the reader logs and skips: a bad command never blocks the control topic.
"""

from __future__ import annotations

import msgspec

from topics.events import ControlCommand, decode_json
from topics.tenancy import check_tenant, record_tenant
from topics.validation import REQUEST_ID_MAX, check_id


class InvalidControl(ValueError):
    """A tts.control record that is not a usable command; the reader skips it."""


def cancel(*, request_id: str | None = None, job_id: str | None = None,
           requested_at: str | None = None, reason: str | None = None,
           tenant: str | None = None) -> ControlCommand:
    """A cancel of one of `tenant`'s requests or jobs (it acts on no other tenant's)."""
    command = ControlCommand(action="cancel", request_id=request_id, job_id=job_id,
                             requested_at=requested_at, reason=reason,
                             tenant=record_tenant(tenant))
    return _checked(command)


def decode_control(raw: bytes | None) -> ControlCommand:
    if raw is None:
        raise InvalidControl("control record has no value")
    try:
        command = decode_json(raw, ControlCommand)
    except msgspec.DecodeError as exc:
        raise InvalidControl(f"not a tts.control.v1 command: {exc}") from None
    return _checked(command)


def control_key(command: ControlCommand) -> bytes:
    """The record key: the request or job it names (DESIGN.md's keying of tts.control)."""
    target = command.request_id or command.job_id or ""
    return target.encode()


def _checked(command: ControlCommand) -> ControlCommand:
    if (command.request_id is None) == (command.job_id is None):
        raise InvalidControl("a cancel names exactly one of request_id and job_id")
    try:
        if command.request_id is not None:
            check_id("request_id", command.request_id, REQUEST_ID_MAX)
        if command.job_id is not None:
            check_id("job_id", command.job_id, REQUEST_ID_MAX)
        if command.tenant is not None:
            check_tenant(command.tenant)
    except ValueError as exc:
        raise InvalidControl(str(exc)) from None
    return command
