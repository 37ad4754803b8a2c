"""`voicefactory usage`: the published reports of one tenant and month, as text or JSON."""

from __future__ import annotations

import io

import orjson
import pytest

import voicefactory
from consumers.clients.usage import show_usage
from pipeline.keys import usage_key
from pipeline.storage import ObjectStore
from pipeline.usage import UsageReport, encode_report
from tests.unit.consumers.gateway.memorystore import MemoryStore

SOURCE = "t1.vf-aggregator"


def _store() -> ObjectStore:
    store = MemoryStore()
    for partition, audio in ((0, 1.5), (4, 2.0)):
        store.put(usage_key("2031-05", SOURCE, partition, tenant="acme"), encode_report(
            UsageReport(tenant="acme", month="2031-05", partition=partition, audio_s=audio,
                        engine_s=0.5, requests=3,
                        updated_at=f"2031-05-0{partition + 1}T00:00:00Z")),
            "application/json")
    fake: ObjectStore = store  # type: ignore[assignment]
    return fake


def test_a_line_of_text_sums_the_partitions() -> None:
    out = io.StringIO()
    show_usage(_store(), SOURCE, "acme", "2031-05", as_json=False, out=out)
    assert out.getvalue() == ("tenant acme, 2031-05 (UTC): 3.500 s of audio, 1.000 s of engine "
                              "time, 6 requests (as published at 2031-05-05T00:00:00Z, 2 "
                              "partition reports)\n")
    out = io.StringIO()
    show_usage(_store(), SOURCE, "rival", "2031-05", as_json=False, out=out)
    assert out.getvalue() == "tenant rival, 2031-05 (UTC): nothing counted\n"


def test_json_is_the_usage_object() -> None:
    out = io.StringIO()
    show_usage(_store(), SOURCE, "acme", "2031-05", as_json=True, out=out)
    assert orjson.loads(out.getvalue()) == {
        "tenant": "acme", "month": "2031-05", "audio_s": 3.5, "engine_s": 1.0, "requests": 6,
        "updated_at": "2031-05-05T00:00:00Z", "partitions": 2}


@pytest.mark.parametrize("argv", [["usage", "--month", "2031-13"],
                                  ["usage", "--tenant", "../x"]])
def test_a_bad_month_or_tenant_exits_2(argv: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")
