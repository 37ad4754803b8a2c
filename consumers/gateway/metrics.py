"""Gateway metrics on their own registry, served at the gateway's `/metrics`.

The app calls the hooks: every finished HTTP exchange -> `on_response(route, status)`; a
speech answer's first audio byte -> `observe_ttfb(seconds)`; streams opening and closing ->
`set_open_streams(n)`; the lag sampler -> `set_lag(n)`; the fleet router, once routing
starts -> `watch_fleet(router)`, read at each scrape. Names (dashboard contract):

    vf_gateway_requests_total{route,status}   route is the template (/v1/voices/{id})
    vf_gateway_ttfb_seconds                   request received -> first audio byte out
    vf_gateway_open_streams                   speech answers in progress
    vf_gateway_interactive_lag                vf-synth's lag on tts.requests.interactive
    vf_gateway_cancels_total                  cancels produced to tts.control
    vf_gateway_failovers_total                requests sent again: worker gone, no chunk yet
    vf_gateway_routes_total{lane,reason}      requests produced, by why the fleet router chose
                                              their worker: home, copy, held, joined, moved
                                              (a profile build there), unrouted (no view)
    vf_gateway_fleet_workers{lane}            live workers in this gateway's fleet view
    vf_gateway_fleet_view_age_seconds         since the view's last answer from the broker
                                              (-1 before the first)
    vf_gateway_audit_events_total{action,result}  audit events written (ok) or not (failed:
                                              the action was refused, 503)
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from consumers.fleet.router import LANES, FleetRouter
from consumers.metrics import CONTENT_TYPE
from topics.fleet import RouteLane

# 5 ms .. 10 s: a cached bench-engine answer and a cold CPU synthesis both land in a bucket.
TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter("vf_gateway_requests", "HTTP requests by route and status",
                                 ["route", "status"], registry=r)
        self._ttfb = Histogram("vf_gateway_ttfb_seconds", "Request received to first audio byte",
                               buckets=TTFB_BUCKETS, registry=r)
        self._streams = Gauge("vf_gateway_open_streams", "Speech answers in progress", registry=r)
        self._lag = Gauge("vf_gateway_interactive_lag",
                          "Synthesis group lag on tts.requests.interactive", registry=r)
        self._cancels = Counter("vf_gateway_cancels", "Cancels produced to tts.control",
                                registry=r)
        self._failovers = Counter("vf_gateway_failovers",
                                  "Requests sent again to another worker: theirs left the "
                                  "fleet view before the first chunk", registry=r)
        self._routes = Counter("vf_gateway_routes", "Requests produced, by lane and why the "
                               "fleet router chose their worker", ["lane", "reason"],
                               registry=r)
        self._audit = Counter("vf_gateway_audit_events", "Audit events by action; failed: "
                              "not written, the action refused", ["action", "result"],
                              registry=r)

        self._fleet_workers = Gauge("vf_gateway_fleet_workers", "Live workers in this "
                                    "gateway's fleet view, by lane", ["lane"], registry=r)
        self._view_age = Gauge("vf_gateway_fleet_view_age_seconds", "Seconds since the fleet "
                               "view's last answer from the broker (-1 before the first)",
                               registry=r)

    def watch_fleet(self, router: FleetRouter) -> None:
        """Read the router's view at each scrape: 0 workers in a lane means every request
        of it goes out unrouted; a growing age, that the view no longer hears the broker."""
        def live(lane: RouteLane) -> Callable[[], float]:
            return lambda: len(router.workers(lane))

        def view_age() -> float:
            age = router.hearing.view_age_s()
            return -1.0 if age is None else age

        for lane in LANES:
            self._fleet_workers.labels(lane=lane).set_function(live(lane))
        self._view_age.set_function(view_age)

    def on_audit(self, action: str, ok: bool) -> None:
        self._audit.labels(action=action, result="ok" if ok else "failed").inc()

    def on_response(self, route: str, status: int) -> None:
        self._requests.labels(route=route, status=str(status)).inc()

    def observe_ttfb(self, seconds: float) -> None:
        self._ttfb.observe(seconds)

    def set_open_streams(self, n: int) -> None:
        self._streams.set(n)

    def set_lag(self, lag: int) -> None:
        self._lag.set(lag)

    def on_cancel(self) -> None:
        self._cancels.inc()

    def on_failover(self) -> None:
        self._failovers.inc()

    def on_route(self, lane: str, reason: str) -> None:
        self._routes.labels(lane=lane, reason=reason).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE
