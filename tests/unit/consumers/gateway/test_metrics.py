"""The gateway's fleet gauges read the router's view at each scrape."""

from __future__ import annotations

from consumers.fleet.router import FleetRouter
from consumers.gateway.metrics import GatewayMetrics
from tests.unit.consumers.fleet.test_router import NOW_MS, Clock, status


def test_the_fleet_gauges_follow_the_view() -> None:
    clock = Clock()
    router = FleetRouter(partitions=4, clock=clock, wall_ms=lambda: NOW_MS)
    metrics = GatewayMetrics()
    metrics.watch_fleet(router)

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("vf_gateway_fleet_workers", lane="batch") == 0
    assert sample("vf_gateway_fleet_view_age_seconds") == -1  # never read
    router.apply(status("w0", [0, 1]))
    router.apply(status("w1", [2, 3]))
    router.hearing.mark_current()
    clock.t = 0.75
    assert sample("vf_gateway_fleet_workers", lane="batch") == 2
    assert sample("vf_gateway_fleet_workers", lane="interactive") == 2
    assert sample("vf_gateway_fleet_view_age_seconds") == 0.75
    clock.t = 2.0
    router.hearing.mark_current()  # read again, and neither spoke: both gone
    assert sample("vf_gateway_fleet_workers", lane="batch") == 0
    assert b"vf_gateway_fleet_workers{lane=\"batch\"} 0.0" in metrics.render()[0]
