from pathlib import Path

from bench.capacity import _outcome, parse_collapsed, top_costs

RAW = "\n".join([
    "_run (asyncio/events.py:84);_fetch_loop (/work/main/consumers/worker.py:170);"
    "decode_request (/work/main/topics/validation.py:40) 30",
    "_bootstrap (threading.py:1002);process_batch (/work/main/pipeline/synthesis.py:90);"
    "encode (/work/main/pipeline/encode.py:30);"
    "write (/venv/lib/python3.11/site-packages/soundfile.py:1200) 50",
    "_bootstrap (threading.py:1002);process_batch (/work/main/pipeline/synthesis.py:95);"
    "put (/work/main/pipeline/storage.py:60);"
    "urlopen (/venv/lib/python3.11/site-packages/urllib3/poolmanager.py:400) 20",
    "not a stack line",
])

def test_collapsed_stacks_are_parsed_with_their_counts() -> None:
    stacks = parse_collapsed(RAW)
    assert [count for _, count in stacks] == [30, 50, 20]
    assert stacks[1][0][-1].startswith("write (")


def test_top_costs_by_self_time_and_by_project_frame() -> None:
    costs = top_costs(parse_collapsed(RAW))
    assert costs["self"][0] == ("write (soundfile.py)", 0.5)
    assert ("decode_request (topics/validation.py)", 0.3) in costs["self"]
    inclusive = dict(costs["inclusive"])
    assert inclusive["process_batch (pipeline/synthesis.py)"] == 0.7  # lines 90 and 95
    assert inclusive["encode (pipeline/encode.py)"] == 0.5
    assert "write (soundfile.py)" not in inclusive  # not a project frame


def test_the_rate_ladder_doubles_then_refines_within_the_failing_octave() -> None:
    from bench.capacity import next_rate

    assert next_rate({}) == 10.0
    assert next_rate({10.0: True, 20.0: True}) == 40.0
    # 40 failed, 20 held: 25, 30, 35 (eighths of the failed rate) above the best held.
    assert next_rate({10.0: True, 20.0: True, 40.0: False}) == 25.0
    assert next_rate({10.0: True, 20.0: True, 40.0: False, 25.0: True}) == 30.0
    # 30 failed too: the search moves below it; 35 would fail as well.
    assert next_rate({10.0: True, 20.0: True, 40.0: False, 25.0: True,
                      30.0: False}) == 26.25
    assert next_rate({10.0: True, 20.0: True, 40.0: False, 25.0: True, 30.0: False,
                      26.25: True}) is None
    assert next_rate({10.0: False}) == 6.25
    assert next_rate({640.0: True}, ceiling=1000.0) is None


def test_the_outcome_names_each_process_cpu_and_says_when_servers_are_missing(
        tmp_path: Path) -> None:
    step = {"rate": 10.0, "sent": 60, "achieved_rps": 9.8, "lag_slope": 0.0, "final_lag": 0.0,
            "sustained": True, "lag": []}
    full: dict[str, float | None] = {"capacity_cpu_ms_worker": 4.0, "capacity_cpu_ms_kafka": 2.0,
            "capacity_cpu_ms_s3": 5.0, "capacity_cpu_ms_driver": 1.5,
            "capacity_cpu_ms_profilers": 0.5, "capacity_cpu_bound_rps": 153.8}
    out = _outcome([step], tmp_path / "spy.txt", {}, full)
    assert out.figures["capacity_cpu_bound_rps"] == 153.8
    assert "| S3 server | 5.0 |" in out.table and "| broker | 2.0 |" in out.table
    assert any("req/s" in note and "cores" in note for note in out.notes)
    partial = {k: v for k, v in full.items() if "kafka" not in k} | {
        "capacity_cpu_bound_rps": None}
    out = _outcome([step], tmp_path / "spy.txt", {}, partial)
    assert "| broker |" not in out.table
    assert any("not started by this stack" in note for note in out.notes)
