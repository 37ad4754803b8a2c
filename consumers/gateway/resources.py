"""What the /v1/voices and /v1/jobs routes share: the caller's tenant, path IDs, answers.

    a route (consumers.gateway.voices, consumers.gateway.jobs; consumers.gateway.console_api
      for the tenant and a voice's 404)
    -> `tenant_of_request`: the tenant its API key names (`request.state.tenant`)
    -> `path_id`: the `{id}` of the path, checked as the CLI checks an ID (400 naming it)
    -> the body, after the CLI's own checks, converted to its msgspec type: `refusal` is the
       400 naming the field the type refuses
    -> the answer: `json_answer` encodes a msgspec type; `voice_not_found`, `job_not_found`
       are the one 404 of an ID the caller cannot see.

Tenancy (docs/gateway.md, "Tenants"): every route works inside the caller's tenant, the one
its API key names (`request.state.tenant`); a `tenant` in a body is never read. Voices, jobs
and their objects are looked up under the tenant's root (pipeline/keys.py), so another
tenant's ID is simply not found: the 404 is the one an unknown ID gets, same code, same
words. The records produced carry the tenant; presigned links (a job's clips and
subtitles) are made fresh for the caller's own objects, valid VF_GATEWAY_PRESIGN_SECONDS.

The bodies and answers are msgspec types (`VoiceForm`, `JobScript`, `Voice`, `JobFinished`,
...): consumers.gateway.openapi publishes them, the answers are encoded from them, and a body
is converted to its type after the CLI's own checks, so one the schema refuses is refused.
"""

from __future__ import annotations

import re

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from consumers.gateway.keys import Tenant
from consumers.gateway.serve import json_error
from topics.validation import check_id


def json_answer(obj: msgspec.Struct, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status, media_type="application/json")


_AT_FIELD = re.compile(r"at `\$\.([A-Za-z_]+)")


def refusal(exc: msgspec.ValidationError) -> Response:
    """A body the CLI's checks passed but its published type refuses: 400 naming the field."""
    found = _AT_FIELD.search(str(exc))
    return json_error(400, f"{exc} (see /openapi.json)", "invalid_request",
                      param=found.group(1) if found else None)


def tenant_of_request(request: Request) -> str:
    """The caller's tenant, from its API key (the guard put it there; never from a body)."""
    tenant: Tenant = request.state.tenant
    return tenant.name


def path_id(request: Request, name: str, limit: int) -> str | Response:
    value = request.path_params["id"]
    try:
        return check_id(name, value, limit)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param=name)


def voice_not_found(voice_id: str) -> Response:
    """The one 404 of a voice the caller cannot see: unknown and another tenant's alike."""
    return json_error(404, f"voice {voice_id!r} is not registered", "voice_not_found")


def job_not_found(job_id: str) -> Response:
    """The one 404 of a job the caller cannot see: unknown and another tenant's alike."""
    return json_error(404, f"job {job_id!r} is unknown", "job_not_found")
