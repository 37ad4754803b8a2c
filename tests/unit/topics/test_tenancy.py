"""Tenant names, the default tenant and where each tenant's objects live."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline import keys
from topics.tenancy import record_tenant, scoped_id, tenant_of, tenant_root


def test_a_record_without_a_tenant_belongs_to_default() -> None:
    assert tenant_of(None) == tenant_of("") == "default"
    assert record_tenant("default") is None and record_tenant(None) is None
    assert record_tenant("acme") == "acme"


def test_default_keeps_the_design_layout_and_others_live_under_their_name() -> None:
    when = datetime(2026, 12, 4, tzinfo=UTC)
    assert keys.voice_json_key("narrator") == "voices/narrator/voice.json"
    assert keys.voice_json_key("narrator", tenant="default") == "voices/narrator/voice.json"
    assert keys.voice_json_key("narrator", tenant="acme") == \
        "tenants/acme/voices/narrator/voice.json"
    assert keys.audio_key("r1", "wav", when, tenant="acme") == \
        "tenants/acme/audio/2026/12/04/r1.wav"
    assert keys.job_json_key("ep1", 2, tenant="acme") == "tenants/acme/jobs/ep1/v2/job.json"
    assert tenant_root("rival") == "tenants/rival/"


@pytest.mark.parametrize("bad", ["../acme", "a/b", "a" * 65, "."])
def test_a_path_like_tenant_never_reaches_a_key(bad: str) -> None:
    with pytest.raises(ValueError):
        keys.voice_prefix("narrator", tenant=bad)
    with pytest.raises(ValueError):
        scoped_id(bad, "narrator")


def test_scoped_ids_of_two_tenants_never_collide() -> None:
    assert scoped_id(None, "narrator") == "narrator"
    assert scoped_id("acme", "narrator") == "acme/narrator"
    assert scoped_id("acme", "narrator") != scoped_id("rival", "narrator")
