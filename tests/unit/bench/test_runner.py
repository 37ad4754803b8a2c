import pytest

from bench.outcome import Outcome, md_table
from bench.runner import BENCHES, REQUIRED, machine, merge, select


def test_the_json_always_holds_every_key_the_issue_names() -> None:
    merged = merge([])
    assert list(merged) == list(REQUIRED)
    assert all(v is None for v in merged.values())
    assert {"overhead_p50_ms", "overhead_p99_ms", "capacity_rps",
            "cache_hit_ratio_voice_keyed", "cache_hit_ratio_least_conn",
            "cache_hit_ratio_round_robin", "restart_moved_fraction", "batching_gain_at_8",
            "rss_growth_fraction", "fault_kill9_lost", "fault_kill9_duplicates",
            "fault_kill9_recovery_s"} <= set(REQUIRED)
    assert any(k.startswith("fault_broker_restart_") for k in REQUIRED)
    assert any(k.startswith("fault_s3_outage_") for k in REQUIRED)


def test_merge_keeps_measured_values_and_extra_keys() -> None:
    merged = merge([Outcome("overhead", {"overhead_p50_ms": 4.2, "overhead_wait0_p50_ms": 1.0},
                            "")])
    assert merged["overhead_p50_ms"] == 4.2
    assert merged["overhead_wait0_p50_ms"] == 1.0
    assert merged["capacity_rps"] is None


def test_merge_refuses_a_figure_reported_twice() -> None:
    with pytest.raises(ValueError, match=r"capacity_rps.*a and b"):
        merge([Outcome("a", {"capacity_rps": 1}, ""), Outcome("b", {"capacity_rps": 2}, "")])


def test_select_keeps_the_documented_order_and_names_unknowns() -> None:
    assert select(None) == list(BENCHES)
    assert select(["faults", "overhead"]) == ["overhead", "faults"]
    with pytest.raises(ValueError, match=r"unknown benchmark.*nope"):
        select(["nope"])


def test_machine_reports_cores_and_memory() -> None:
    m = machine()
    assert int(m["nproc"]) >= 1
    assert float(m["ram_gib"]) > 0


def test_md_table_formats_cells() -> None:
    assert md_table(["a", "b"], [[0.12345, None], [12.34, "x"]]) == (
        "| a | b |\n|---|---|\n| 0.123 | - |\n| 12.3 | x |")


def test_each_name_the_cli_offers_runs_its_own_module() -> None:
    import voicefactory
    from bench import NAMES

    parser = voicefactory.build_parser()
    for name in NAMES:  # every measurement is selectable, and selects bench.<name>
        assert parser.parse_args(["bench", "--only", name]).only == [name]
        assert BENCHES[name].__name__ == f"bench.{name}"
        assert callable(BENCHES[name].run)
