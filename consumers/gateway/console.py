"""The web console: static files from the package, served under /console with a strict CSP.

    GET /console            -> web/index.html (a shell: nav + <main>; app.js renders pages)
    GET /console/{name}     -> web/{name} when it is one of the shipped files, else 404
Every answer carries `Content-Security-Policy` (only this origin: no inline script or style,
no framing, media from this origin or the page's own blob: URLs), `X-Content-Type-Options:
nosniff` and `Referrer-Policy: no-referrer`. No key is needed to fetch the files: the page
asks for the API key and sends it as `Authorization: Bearer` on its /v1 calls (app.js keeps
it in sessionStorage only). The files are package data (pyproject), so a wheel carries them.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

WEB = Path(__file__).resolve().parent / "web"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def shipped() -> dict[str, Path]:
    """The console's files by name: only these are ever served (no path from the URL)."""
    return {p.name: p for p in WEB.iterdir() if p.is_file() and p.suffix in TYPES}


async def page(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    path = shipped().get(name)
    if path is None:
        return Response(b"not found", 404, media_type="text/plain", headers=HEADERS)
    return Response(path.read_bytes(), media_type=TYPES[path.suffix], headers=HEADERS)


async def to_slash(request: Request) -> Response:
    return RedirectResponse("/console/", 308)


def routes() -> list[Route]:
    return [Route("/console", to_slash, methods=["GET"]),
            Route("/console/", page, methods=["GET"]),
            Route("/console/{name}", page, methods=["GET"])]
