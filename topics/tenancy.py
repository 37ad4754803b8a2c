"""Tenants: who owns a record or an object, and where a tenant's objects live.

Every record a tenant causes (request, voice registration, result, job event, control
command, audit event) carries `tenant`. The gateway sets it from the caller's API key and
never trusts a value in the body; the CLI uses `--tenant` (default `default`). A record
without the field, written before tenancy existed, belongs to the `default` tenant.

Objects: the `default` tenant keeps the layout DESIGN.md names (`voices/...`, `audio/...`,
`jobs/...`), so nothing stored before tenancy moves; every other tenant's objects are the
same layout under `tenants/{tenant}/`. IDs (voice, job, request) are unique within a
tenant only: two tenants may both have a voice `narrator`.
"""

from __future__ import annotations

from topics.validation import check_id

DEFAULT_TENANT = "default"
TENANT_MAX = 64


def tenant_of(value: str | None) -> str:
    """The tenant a record belongs to: its field, or `default` when absent."""
    return value or DEFAULT_TENANT


def check_tenant(value: str) -> str:
    """A tenant name becomes part of object keys: the ID charset, at most 64 characters."""
    return check_id("tenant", value, TENANT_MAX)


def tenant_root(tenant: str | None) -> str:
    """The prefix of a tenant's objects: '' for `default`, else `tenants/{tenant}/`."""
    name = tenant_of(tenant)
    if name == DEFAULT_TENANT:
        return ""
    return f"tenants/{check_tenant(name)}/"


def record_tenant(tenant: str | None) -> str | None:
    """The value a record's `tenant` field gets: None (omitted) for `default`, so records of
    a single-tenant deployment stay as they were."""
    name = tenant_of(tenant)
    check_tenant(name)
    return None if name == DEFAULT_TENANT else name


def scoped_id(tenant: str | None, object_id: str) -> str:
    """A tenant-unique ID made fleet-unique, for keys of compacted topics and state tables:
    `id` for `default`, `tenant/id` for the others (`/` is outside the ID charset, so the two
    forms never collide)."""
    name = tenant_of(tenant)
    return object_id if name == DEFAULT_TENANT else f"{check_tenant(name)}/{object_id}"
