from bench.capacity import parse_collapsed, top_costs

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
