"""The HTTP status a final record's status and error code become (docs/gateway.md)."""

from __future__ import annotations

import pytest

from consumers.gateway.serve import REJECTED_CODE, status_for
from topics.errors import ErrorCode


@pytest.mark.parametrize(("final", "code", "http"), [
    ("rejected", "invalid_request", 400),
    ("rejected", "voice_not_found", 404),
    ("rejected", "reference_invalid", 422),
    ("rejected", "request_id_reused", 409),  # an idempotency key reused: 409 Conflict
    ("failed", "engine_error", 502),
    ("expired", "deadline_exceeded", 504),
    ("cancelled", "cancelled", 409),
    (None, None, 502),
])
def test_final_status_and_code_map_to_http(final: str | None, code: str | None,
                                           http: int) -> None:
    assert status_for(final, code) == http


@pytest.mark.parametrize("code", [c.value for c in ErrorCode])
def test_every_error_code_gets_a_client_or_server_error(code: str) -> None:
    assert 400 <= status_for("rejected", code) < 500
    assert status_for("failed", code) >= 500


def test_the_docs_table_names_the_status_of_every_special_rejection() -> None:
    from pathlib import Path

    table = (Path(__file__).resolve().parents[4] / "docs" / "gateway.md").read_text("utf-8")
    row = next(line for line in table.splitlines() if line.startswith("| `rejected` |"))
    for code, http in REJECTED_CODE.items():
        assert f"{http} for `{code}`" in row
