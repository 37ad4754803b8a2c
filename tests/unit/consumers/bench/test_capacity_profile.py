from consumers.bench.capacity import parse_collapsed, top_costs

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
