"""Read-only /v1 routes the console needs beyond the API's own: stored bytes, same origin,
and what the replica knows about the fleet. All behind the guard's Bearer key, like /v1.

    GET /v1/voices/{id}/reference        voice.json's reference object, its own audio type
    GET /v1/jobs/{id}/subtitles          the closed job's SRT (attachment)
    GET /v1/jobs/{id}/clips/{index}      one line's clip of a closed job (the audio object
                                         job.json names, when it is in the gateway's bucket)
    GET /v1/jobs/{id}/clips.zip          every clip of a closed job, stored (not deflated),
                                         named {line:04d}-{request_id}.{format}
    GET /v1/jobs/{id}/timeline           job.json's timeline: each line's start and end (s)
        (a job's routes read its latest finished version, `revisions.latest_finished`, as
        GET /v1/jobs/{id} does: a revision's carried clips are in its own job.json)
    GET /v1/fleet                        the fleet view's worker statuses (consumers.fleet.summary:
        partitions, backlog/queued/inflight and slots per lane, hot voices, age, and since
        each worker started its profile cache lookups and failed results by error code),
        the fleet's cache hit ratio and errors by code summed over the workers heard (since
        they started, and over the last 5 minutes: `RecentErrors`), the lag
        sampler's last sample per partition of tts.requests.interactive, this replica's
        open streams and reply partitions, its 4xx/5xx answers by route and status
        (its own vf_gateway_requests_total) and the requests it produced by lane and route
        reason (vf_gateway_routes_total): no Prometheus server needed.
The JSON answers are msgspec types (`JobTimeline`, `Fleet`), encoded from them and
published by consumers.gateway.openapi, like the answers of consumers.gateway.voices and
consumers.gateway.jobs.
Every route reads only the caller's tenant's objects (the key's tenant, as in
consumers.gateway.resources): another tenant's voice or job is the 404 of an unknown one, and
a clip is served only from the tenant's own `audio/` objects.
Why serve bytes here rather than hand out presigned links: the console's CSP allows media
only from its own origin (or blob:), and the object store is another origin.
"""

from __future__ import annotations

import asyncio
import functools
import io
import time
import zipfile
from collections import deque
from collections.abc import Callable
from typing import Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.clients.revisions import latest_finished
from consumers.fleet.router import ROUTE_REASONS
from consumers.fleet.summary import (
    CodeCount,
    FleetCache,
    FleetWorker,
    fleet_counts,
    worker_views,
)
from consumers.gateway.resources import path_id, tenant_of_request, voice_not_found
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import json_error
from pipeline import keys
from pipeline.voices import read_voice
from topics.events import AudioRef, ClipSpan, JobCompleted
from topics.fleet import WorkerStatus
from topics.validation import REQUEST_ID_MAX, VOICE_ID_MAX

MAX_ZIP_BYTES = 512 * 2**20  # a zip is built in memory: larger jobs download clip by clip
AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac",
               "ogg": "audio/ogg", "opus": "audio/ogg", "m4a": "audio/mp4", "aac": "audio/aac"}


# -- answers -----------------------------------------------------------------------------------

class JobTimeline(msgspec.Struct, kw_only=True):
    """GET /v1/jobs/{id}/timeline: where each line sits in the job's track."""

    id: str
    object: Literal["job.timeline"]
    version: int
    duration_s: float
    timeline: list[ClipSpan]


class FleetView(msgspec.Struct, kw_only=True):
    available: bool
    records: int  # statuses read from tts.fleet


class InteractiveLag(msgspec.Struct, kw_only=True):
    total: int | None  # None until the first sample
    threshold: int  # 503 `overloaded` above it
    partitions: dict[str, int]  # partition -> lag


class ReplicaState(msgspec.Struct, kw_only=True):
    instance: str
    open_streams: int
    reply_partitions: list[int]


class RouteCount(msgspec.Struct, kw_only=True):
    lane: str  # batch, interactive
    reason: str  # why the fleet router chose the worker: consumers.fleet.router.ROUTE_REASONS
    count: int


class ErrorCount(msgspec.Struct, kw_only=True):
    route: str
    status: int
    count: int


class Fleet(msgspec.Struct, kw_only=True):
    """GET /v1/fleet: what this replica knows about the fleet and its own answers."""

    object: Literal["fleet"]
    routing: Literal["fleet", "voice_id"]
    view: FleetView
    workers: list[FleetWorker]
    cache: FleetCache  # summed over the workers heard
    errors_by_code: list[CodeCount]  # the workers' failed answers, most first
    interactive_lag: InteractiveLag
    gateway: ReplicaState
    errors: list[ErrorCount]
    # the workers' failed answers of the last `recent_window_s`, as this replica saw them
    recent_errors_by_code: list[CodeCount] = msgspec.field(default_factory=list)
    recent_window_s: int = 0
    # this replica's requests produced since it started, by lane and route reason
    routes: list[RouteCount] = msgspec.field(default_factory=list)


RECENT_WINDOW_S = 300
MAX_SNAPSHOTS = 1_000  # a console polls every few seconds: 5 min is ~150


class RecentErrors:
    """Failed results by code over the last `window_s`, from the workers' counters, which
    count since each worker started: every GET /v1/fleet keeps a snapshot, and the recent
    count is today's counter less the oldest snapshot inside the window that has the
    worker (a worker first seen inside the window counts from then; a counter lower than
    before means a restart, and counts from zero)."""

    def __init__(self, window_s: int = RECENT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._snapshots: deque[tuple[float, dict[str, dict[str, int]]]] = deque()

    def observe(self, statuses: list[WorkerStatus]) -> list[CodeCount]:
        now = self._clock()
        totals = {s.worker: dict(s.errors) for s in statuses}
        self._snapshots.append((now, totals))
        # drop snapshots older than the window, keeping the newest of those as the baseline
        while len(self._snapshots) > 1 and (
                self._snapshots[1][0] <= now - self.window_s
                or len(self._snapshots) > MAX_SNAPSHOTS):
            self._snapshots.popleft()
        recent: dict[str, int] = {}
        for worker, codes in totals.items():
            base = next(snap[worker] for _, snap in self._snapshots if worker in snap)
            for code, count in codes.items():
                before = base.get(code, 0)
                added = count - before if count >= before else count
                if added > 0:
                    recent[code] = recent.get(code, 0) + added
        return [CodeCount(code=code, count=count)
                for code, count in sorted(recent.items(), key=lambda e: (-e[1], e[0]))]


def _json(obj: msgspec.Struct) -> Response:
    return Response(msgspec.json.encode(obj), media_type="application/json")


async def reference(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    voice_id = path_id(request, "voice_id", VOICE_ID_MAX)
    if isinstance(voice_id, Response):
        return voice_id
    tenant = tenant_of_request(request)
    event = await asyncio.to_thread(functools.partial(read_voice, gw.store, voice_id,
                                                      tenant=tenant))
    if event is None:
        return voice_not_found(voice_id)
    key = event.reference.removeprefix(f"s3://{gw.store.bucket}/")
    # another bucket, or not its own
    if not key.startswith(keys.voice_prefix(voice_id, tenant=tenant)):
        return json_error(404, f"voice {voice_id!r}'s reference is not in this store",
                          "reference_not_found")
    data = await asyncio.to_thread(gw.store.get, key)
    if data is None:
        return json_error(404, f"voice {voice_id!r} has no reference object",
                          "reference_not_found")
    ext = key.rsplit(".", 1)[-1]
    return Response(data, media_type=AUDIO_TYPES.get(ext, "application/octet-stream"))


async def _closed_job(request: Request) -> tuple[int, JobCompleted] | Response:
    """The job's latest finished version and its event."""
    gw: Gateway = request.app.state.gateway
    job_id = path_id(request, "job_id", REQUEST_ID_MAX)
    if isinstance(job_id, Response):
        return job_id
    done = await asyncio.to_thread(functools.partial(latest_finished, gw.store, job_id,
                                                     tenant=tenant_of_request(request)))
    if done is None:
        return json_error(404, f"job {job_id!r} is not closed (or unknown)", "job_not_found")
    return done.version, done.event


async def subtitles(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    closed = await _closed_job(request)
    if isinstance(closed, Response):
        return closed
    version, event = closed
    data = await asyncio.to_thread(gw.store.get, keys.job_subtitles_key(
        event.job_id, version, tenant=tenant_of_request(request)))
    if not event.subtitles or data is None:
        return json_error(404, f"job {event.job_id!r} has no subtitles", "subtitles_not_found")
    return Response(data, media_type="application/x-subrip", headers={
        "Content-Disposition": f'attachment; filename="{event.job_id}.srt"'})


async def clip(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    closed = await _closed_job(request)
    if isinstance(closed, Response):
        return closed
    event = closed[1]
    index = request.path_params["index"]
    found = next((c for c in event.clips if c.index == index), None)
    if found is None or found.audio is None:
        return json_error(404, f"job {event.job_id!r} has no clip for line {index}",
                          "clip_not_found")
    if not _own_clip(gw, tenant_of_request(request), found.audio):
        return json_error(404, f"line {index}'s clip is not in this gateway's store",
                          "clip_not_found")
    data = await asyncio.to_thread(gw.store.get, found.audio.key)
    if data is None:
        return json_error(404, f"line {index}'s clip object is gone", "clip_not_found")
    return Response(data, media_type=AUDIO_TYPES.get(found.audio.format,
                                                     "application/octet-stream"))


def _own_clip(gw: Gateway, tenant: str, audio: AudioRef) -> bool:
    """A clip the gateway serves: in its bucket, among the tenant's own audio objects."""
    return audio.bucket == gw.store.bucket and \
        audio.key.startswith(keys.audio_root(tenant=tenant))


def _stored_clips(gw: Gateway, event: JobCompleted, tenant: str) -> list[tuple[str, str]]:
    """(zip name, object key) of each of the tenant's clips in the gateway's bucket, in line
    order."""
    return [(f"{c.index + 1:04d}-{c.request_id}.{c.audio.format}", c.audio.key)
            for c in sorted(event.clips, key=lambda c: c.index)
            if c.audio is not None and _own_clip(gw, tenant, c.audio)]


async def clips_zip(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    closed = await _closed_job(request)
    if isinstance(closed, Response):
        return closed
    event = closed[1]
    size = sum(c.audio.bytes for c in event.clips if c.audio is not None)
    if size > MAX_ZIP_BYTES:
        return json_error(413, f"job {event.job_id!r}'s clips are {size:,} bytes, over the "
                               f"{MAX_ZIP_BYTES:,} a zip is made of; fetch them one by one",
                          "zip_too_large")
    wanted = _stored_clips(gw, event, tenant_of_request(request))

    def build() -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
            for name, key in wanted:
                data = gw.store.get(key)
                if data is not None:
                    archive.writestr(name, data)
        return out.getvalue()

    data = await asyncio.to_thread(build)
    return Response(data, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{event.job_id}-clips.zip"'})


async def timeline(request: Request) -> Response:
    closed = await _closed_job(request)
    if isinstance(closed, Response):
        return closed
    version, event = closed
    return _json(JobTimeline(id=event.job_id, object="job.timeline", version=version,
                             duration_s=event.duration_s, timeline=event.timeline))


def routes_by_reason(gw: Gateway) -> list[RouteCount]:
    """This replica's produced requests so far, by lane and route reason (its own
    vf_gateway_routes_total), in lane order and ROUTE_REASONS' order."""
    out = []
    for family in gw.metrics.registry.collect():
        if family.name != "vf_gateway_routes":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                out.append(RouteCount(lane=sample.labels["lane"], reason=sample.labels["reason"],
                                      count=int(sample.value)))
    order = {reason: i for i, reason in enumerate(ROUTE_REASONS)}
    return sorted(out, key=lambda r: (r.lane, order.get(r.reason, len(order))))


def responses_by_status(gw: Gateway) -> list[ErrorCount]:
    """This replica's 4xx and 5xx answers so far, by route and status, most first."""
    out = []
    for family in gw.metrics.registry.collect():
        if family.name != "vf_gateway_requests":
            continue
        for sample in family.samples:
            status = sample.labels.get("status", "")
            if sample.name.endswith("_total") and status[:1] in ("4", "5"):
                out.append(ErrorCount(route=sample.labels["route"], status=int(status),
                                      count=int(sample.value)))
    return sorted(out, key=lambda e: (-e.count, e.route, e.status))


async def fleet(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    limits = gw.settings.gateway
    statuses = gw.fleet.router.statuses() if gw.fleet is not None else []
    cache, by_code = fleet_counts(statuses)
    recent_errors: RecentErrors | None = getattr(request.app.state, "recent_errors", None)
    if recent_errors is None:
        recent_errors = request.app.state.recent_errors = RecentErrors()
    return _json(Fleet(
        object="fleet",
        routing="fleet" if gw.fleet is not None else "voice_id",
        view=FleetView(available=gw.fleet is not None and gw.fleet.available,
                       records=gw.fleet.records if gw.fleet is not None else 0),
        workers=[] if gw.fleet is None else worker_views(gw.fleet.router,
                                                         time.time() * 1000),
        cache=cache, errors_by_code=by_code,
        interactive_lag=InteractiveLag(
            total=gw.lag.lag, threshold=limits.lag_threshold,
            partitions=dict(sorted(gw.lag.by_partition.items(), key=_plain_first))),
        gateway=ReplicaState(instance=gw.instance,
                             open_streams=gw.limiter.open_streams(),
                             reply_partitions=sorted(gw.router.partitions)),
        errors=responses_by_status(gw),
        recent_errors_by_code=recent_errors.observe(statuses),
        recent_window_s=recent_errors.window_s, routes=routes_by_reason(gw)))


def routes() -> list[Route]:
    return [Route("/v1/voices/{id}/reference", reference, methods=["GET"]),
            Route("/v1/jobs/{id}/subtitles", subtitles, methods=["GET"]),
            Route("/v1/jobs/{id}/clips/{index:int}", clip, methods=["GET"]),
            Route("/v1/jobs/{id}/clips.zip", clips_zip, methods=["GET"]),
            Route("/v1/jobs/{id}/timeline", timeline, methods=["GET"]),
            Route("/v1/fleet", fleet, methods=["GET"])]


def _plain_first(item: tuple[str, int]) -> tuple[bool, int]:
    """Lag columns in partition order, the plain lane's ("3") before the shard lane's ("s3")."""
    label = item[0]
    return label.startswith("s"), int(label.lstrip("s"))
