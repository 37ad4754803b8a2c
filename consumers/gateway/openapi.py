"""The gateway's OpenAPI 3.1 document, generated from the msgspec types its routes use.

    consumers.gateway.openapi_components: the bodies and answers of every route (the msgspec
      types of speech, voices, jobs, consents, console_api and usage; the error object, the
      probes' bodies and the `sse` events) -> components.schemas (JSON Schema 2020-12, the
      dialect of OpenAPI 3.1), the answers' headers, bearer auth
    consumers.gateway.openapi_paths: `OPERATIONS`, one entry per route: its body, its
      answers, and the refusals every /v1 route shares (401 without a key, 429 over the
      tenant's rate, 413 over the body limit, 503 while the object store is down) -> paths,
      with bearer auth on /v1/*
    -> `document()` (here), built once -> GET /openapi.json (no key). /healthz, /readyz and
      /metrics are on the ops port (consumers.gateway.ops), not in this document; `Health`
      and `Readiness` describe their bodies.

Every route of the app is described but the console's own files (`openapi_paths.NOT_API`): a
page and its script and style, not an API; docs/console.md describes them.

Every body the routes accept is converted to its type after their own checks, so nothing
the document calls invalid is accepted; tests/integration/test_gateway_fuzz.py fuzzes the
gateway from this document (schemathesis) to find where the two still disagree.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from consumers.gateway.openapi_components import JSON, components
from consumers.gateway.openapi_paths import paths

OPENAPI_VERSION = "3.1.0"


def _version() -> str:
    try:
        return metadata.version("voicefactory")
    except metadata.PackageNotFoundError:  # a checkout run without being installed
        return "0.0.0"


@cache
def document() -> dict[str, Any]:
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "VoiceFactory gateway", "version": _version(),
                 "description": "OpenAI's speech API, voices and jobs in front of the Kafka "
                                "fleet (docs/gateway.md). Errors are OpenAI's error object."},
        "tags": [{"name": name} for name in ("audio", "voices", "jobs", "fleet", "probes")],
        "paths": paths(),
        "components": components(),
    }


@cache
def _encoded() -> bytes:
    return msgspec.json.encode(document())


async def openapi_json(request: Request) -> Response:
    return Response(_encoded(), media_type=JSON)
