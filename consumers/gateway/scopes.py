"""Which scope each /v1 route needs, and the 403 that names a missing one.

    Guard (consumers.gateway.app), after the key is known:
      the route Starlette will pick (method + path template, `route_of`) -> `ROUTE_SCOPES`
      -> none of the accepted scopes on the key -> 403 `missing_scope` naming the scope
A route absent from the table needs `admin` (fail closed: a new route nobody declared is
an operator's until someone says otherwise; a unit test lists every /v1 route of the app
and fails on an undeclared one). A path no route matches is left to Starlette (404/405).

Decisions (docs/gateway.md, "Scopes"):
- reading voices (list, one voice) takes `speech` or `voices:write`: a key that speaks must
  be able to see which voices it may speak with; the reference recording itself (the
  speaker's own voice, GET /v1/voices/{id}/reference) needs `voices:write`.
- every job route, reads included, takes `jobs`: a job's answers carry its clips.
- `admin` is for operator views (/v1/fleet): they show every tenant's load and voices.
  It implies nothing else, nor does anything imply it.
"""

from __future__ import annotations

import re

from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from consumers.gateway.serve import json_error

_CONVERTER = re.compile(r"\{(\w+):\w+\}")
READ_VOICES = ("speech", "voices:write")
ADMIN = ("admin",)

# (method, path template as the route declares it) -> scopes of which any one will do
ROUTE_SCOPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("POST", "/v1/audio/speech"): ("speech",),
    ("GET", "/v1/voices"): READ_VOICES,
    ("POST", "/v1/voices"): ("voices:write",),
    ("GET", "/v1/voices/{id}"): READ_VOICES,
    ("DELETE", "/v1/voices/{id}"): ("voices:write",),
    ("GET", "/v1/voices/{id}/reference"): ("voices:write",),
    ("POST", "/v1/jobs"): ("jobs",),
    ("GET", "/v1/jobs/{id}"): ("jobs",),
    ("POST", "/v1/jobs/{id}/rerun"): ("jobs",),
    ("POST", "/v1/jobs/{id}/cancel"): ("jobs",),
    ("GET", "/v1/jobs/{id}/subtitles"): ("jobs",),
    ("GET", "/v1/jobs/{id}/clips/{index}"): ("jobs",),
    ("GET", "/v1/jobs/{id}/clips.zip"): ("jobs",),
    ("GET", "/v1/jobs/{id}/timeline"): ("jobs",),
    ("POST", "/v1/audio/voice_consents"): ("voices:write",),
    ("GET", "/v1/audio/voice_consents/{id}"): ("voices:write",),
    ("DELETE", "/v1/audio/voice_consents/{id}"): ("voices:write",),
    ("POST", "/v1/audio/voices"): ("voices:write",),
    ("GET", "/v1/usage"): ("speech", "jobs"),  # the tenant's own figures: any key that spends
    ("GET", "/v1/fleet"): ADMIN,
}


def route_of(routes: list[BaseRoute], scope: Scope) -> tuple[str, str] | None:
    """(method, path template) of the route that will answer `scope`, or None when none
    takes this path and method (Starlette's 404 or 405 follows; nothing to guard)."""
    for route in routes:
        if isinstance(route, Route) and route.matches(scope)[0] == Match.FULL:
            method = scope["method"]
            return ("GET" if method == "HEAD" else method), route.path
    return None


def needed(method: str, template: str) -> tuple[str, ...]:
    """The scopes of which one lets a key call `method template`; `{index:int}` and
    `{index}` are one template (the route's converter is not part of its name)."""
    return ROUTE_SCOPES.get((method, _CONVERTER.sub(r"{\1}", template)), ADMIN)


def refusal(held: frozenset[str], method: str, template: str) -> Response | None:
    """403 naming the missing scope, or None when the key holds one the route accepts."""
    accepted = needed(method, template)
    if any(s in held for s in accepted):
        return None
    either = " or ".join(accepted)
    return json_error(403, f"this key lacks the scope {either} that {method} {template} "
                           f"needs (voicefactory gateway keys add TENANT --scopes ...)",
                      "missing_scope", fields={"scope": accepted[0], "accepted": list(accepted)})
