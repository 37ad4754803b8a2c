"""The kcat build's pure parts: its pins, and which apt entries it turns into deb-src."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from deploy.tools import kcat


def test_the_pinned_librdkafka_can_log_in_with_scram_to_kafka_4() -> None:
    # confluentinc/librdkafka#4895: SCRAM against Kafka 4.x needs 2.6.1 or newer
    version = tuple(int(p) for p in kcat.KCAT.librdkafka_version.split("."))
    assert version >= (2, 6, 1)
    assert kcat.KCAT.name == f"kcat-{kcat.KCAT.version}-librdkafka-{kcat.KCAT.librdkafka_version}"
    assert all(len(h) == 64 for h in (kcat.KCAT.orig_sha256, kcat.KCAT.crate_sha256))


def test_only_the_machines_own_debian_main_entries_become_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n")
    (tmp_path / "sources.list.d" / "vendor.sources").write_text(
        "Types: deb\nURIs: https://vendor.example/apt\nSuites: nodistro\nComponents: main\n")
    (tmp_path / "sources.list").write_text(
        "# a comment\ndeb [arch=amd64] http://other.example/debian bookworm main contrib\n"
        "deb https://vendor.example/apt cloud-sdk-bookworm main\n"
        "deb-src http://other.example/debian bookworm main\n")
    assert kcat._debian_entries(tmp_path, "bookworm") == [
        ("http://mirror.example/debian", "bookworm",
         "/usr/share/keyrings/debian-archive-keyring.gpg"),
        ("http://other.example/debian", "bookworm",
         "/usr/share/keyrings/debian-archive-keyring.gpg")]


def test_no_debian_entry_is_an_error_that_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(kcat.BuildError, match="no apt entry for Debian bookworm main"):
        kcat._debian_entries(tmp_path, "bookworm")


def test_a_missing_compiler_is_named_before_anything_is_fetched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "gcc" else "/bin/x")

    def no_run(cmd: list[str], cwd: Path, env: dict[str, str] | None) -> None:
        raise AssertionError(f"ran {cmd}")

    with pytest.raises(kcat.BuildError, match="'gcc' is not on PATH"):
        kcat.build(kcat.KCAT, tmp_path, no_run, io.StringIO())
