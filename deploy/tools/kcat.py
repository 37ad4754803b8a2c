"""Builds a kcat that can log in to Kafka 4.x with SCRAM, from two registries, into the cache.

Debian's kcat (1.7.1 on bookworm) links librdkafka 2.0.2, and librdkafka before 2.6.1 cannot
complete a SCRAM login to any Kafka 4.x broker (it repeats the client nonce in its final
message, which Kafka 4 rejects: confluentinc/librdkafka#4895). No registry this project can
reach ships a newer kcat binary, but both sources do come from registries:

    librdkafka 2.12.1  the crates.io crate rdkafka-sys 4.10.0+2.12.1 vendors librdkafka's
                       release source; `cargo vendor` fetches it (checksum from the crates.io
                       index, then our pin of the .crate's sha256)
    kcat 1.7.1         Debian's source package (kafkacat): `apt-get source --print-uris`
                       against the machine's own Debian mirror with deb-src enabled in a
                       private apt state dir, then the upstream tarball checked against our pin

    librdkafka: ./configure (ssl + SCRAM built in; no curl, GSSAPI, zstd) && make -C src
    kcat:       ./configure --enable-static against that librdkafka.a && make
    -> tools/kcat-1.7.1-librdkafka-2.12.1/kcat  (one binary, libssl/libcrypto/libz shared)

Needs gcc, make, pkg-config, libssl-dev and zlib1g-dev (`make setup` installs them), cargo and
apt-get. About a minute on two cores; the `.complete` marker makes later runs free.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# the installer's runner: (argv, cwd, env or None for ours) -> None, raising on failure
RunFn = Callable[[list[str], Path, "dict[str, str] | None"], None]


@dataclass(frozen=True)
class KcatBuild:
    version: str
    debian_source: str  # Debian's source package name
    debian_version: str
    orig_sha256: str  # of kafkacat_<version>.orig.tar.gz
    crate: str
    crate_version: str
    crate_sha256: str  # of the .crate, as the crates.io index lists it

    @property
    def librdkafka_version(self) -> str:
        return self.crate_version.split("+", 1)[1]

    @property
    def name(self) -> str:
        return f"kcat-{self.version}-librdkafka-{self.librdkafka_version}"


KCAT = KcatBuild(
    version="1.7.1", debian_source="kafkacat", debian_version="1.7.1-2",
    orig_sha256="4b957b7ffc728a88e163bc4e581aa371e56c7e74c8b84b1fe0583d0302ef8d58",
    crate="rdkafka-sys", crate_version="4.10.0+2.12.1",
    crate_sha256="e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77",
)
# librdkafka's own configure: SCRAM needs only OpenSSL; the optional libraries it would link
# (curl for OIDC, cyrus-sasl for GSSAPI, zstd) are left out so the -dev packages stay few.
_LIBRDKAFKA_CONFIGURE = ("--disable-gssapi", "--disable-sasl", "--disable-curl",
                         "--disable-zstd", "--disable-lz4-ext", "--enable-ssl")


class BuildError(RuntimeError):
    pass


def build(spec: KcatBuild, staging: Path, run: RunFn, out: TextIO) -> Path:
    """Fetch both sources, build, leave `staging/kcat`; raises BuildError naming the step."""
    for tool in ("apt-get", "gcc", "make", "pkg-config"):
        if shutil.which(tool) is None:
            raise BuildError(f"'{tool}' is not on PATH (building kcat {spec.version} with "
                             f"librdkafka {spec.librdkafka_version} needs apt-get, gcc, make, "
                             "pkg-config and cargo; `make setup` installs the Debian ones)")
    with tempfile.TemporaryDirectory(prefix="vf-kcat-") as tmp:
        work = Path(tmp)
        print(f"fetching librdkafka {spec.librdkafka_version} ({spec.crate} "
              f"{spec.crate_version}, crates.io) ...", file=out, flush=True)
        librdkafka = _crate_source(spec, work, run) / "librdkafka"
        print(f"fetching kcat {spec.version} (Debian source package {spec.debian_source}) ...",
              file=out, flush=True)
        kcat_src = _debian_source(spec, work, run)
        prefix = work / "prefix"
        print("building librdkafka ...", file=out, flush=True)
        run(["./configure", f"--prefix={prefix}", *_LIBRDKAFKA_CONFIGURE], librdkafka, None)
        run(["make", f"-j{os.cpu_count() or 2}", "-C", "src"], librdkafka, None)
        run(["make", "-C", "src", "install"], librdkafka, None)
        static = prefix / "lib" / "librdkafka.a"
        print("building kcat (librdkafka linked in statically) ...", file=out, flush=True)
        env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"),
                   STATIC_LIB_rdkafka=str(static))
        run(["./configure", f"--prefix={work / 'kcat-prefix'}", "--enable-static",
             "--disable-json", "--disable-avro"], kcat_src, env)
        run(["make"], kcat_src, env)
        built = staging / "kcat"
        shutil.copy2(kcat_src / "kcat", built)
    linked = linked_librdkafka(built)
    if linked != spec.librdkafka_version:
        raise BuildError(f"the kcat built reports librdkafka {linked!r}, expected "
                         f"{spec.librdkafka_version}")
    return built


def linked_librdkafka(kcat: Path | str) -> str:
    """The librdkafka version `kcat -V` reports ("" when it says none)."""
    proc = subprocess.run([str(kcat), "-V"], capture_output=True, text=True, check=False)
    found = re.search(r"librdkafka (\d+\.\d+\.\d+)", proc.stdout + proc.stderr)
    return found.group(1) if found else ""


def _crate_source(spec: KcatBuild, work: Path, run: RunFn) -> Path:
    """`cargo vendor` of a throwaway package that depends on exactly the crate: cargo checks
    the download against the crates.io index; the vendored checksum is then held to our pin."""
    package = work / "crate"
    (package / "src").mkdir(parents=True)
    (package / "src" / "lib.rs").write_text("")
    (package / "Cargo.toml").write_text(
        '[package]\nname = "vf-librdkafka-source"\nversion = "0.0.0"\nedition = "2021"\n'
        'publish = false\n\n[dependencies]\n'
        f'{spec.crate} = {{ version = "={spec.crate_version}", default-features = false }}\n')
    run([_cargo(), "vendor", "--quiet", "--versioned-dirs", str(work / "vendor")], package,
        dict(os.environ, CARGO_TERM_COLOR="never"))
    source = work / "vendor" / f"{spec.crate}-{spec.crate_version}"
    checksum = json.loads((source / ".cargo-checksum.json").read_text())["package"]
    if checksum != spec.crate_sha256:
        raise BuildError(f"{spec.crate} {spec.crate_version} from crates.io has sha256 "
                         f"{checksum}, pinned {spec.crate_sha256}")
    return source


def _cargo() -> str:
    home_cargo = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "cargo"
    found = shutil.which("cargo") or (str(home_cargo) if home_cargo.exists() else None)
    if found is None:
        raise BuildError("'cargo' is not on PATH nor in $CARGO_HOME/bin (it fetches "
                         "librdkafka's source from crates.io)")
    return found


def _debian_source(spec: KcatBuild, work: Path, run: RunFn) -> Path:
    """The upstream tarball of Debian's source package, located by apt (deb-src of this
    machine's own Debian entries, in a private state dir: the system's apt lists are not
    touched) and held to our pin."""
    apt = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "sources"):
        (apt / sub).mkdir(parents=True)
    (apt / "sources" / "debian-src.list").write_text("".join(
        f"deb-src [signed-by={keyring}] {uri} {suite} main\n"
        for uri, suite, keyring in _debian_entries()))
    options = ["-o", "Dir::Etc::SourceList=/dev/null",
               "-o", f"Dir::Etc::SourceParts={apt / 'sources'}",
               "-o", f"Dir::State::Lists={apt / 'lists'}",
               "-o", f"Dir::Cache={apt / 'cache'}", "-o", "Debug::NoLocking=1"]
    run(["apt-get", "-qq", *options, "update"], work, None)
    proc = subprocess.run(["apt-get", *options, "source", "--print-uris",
                           f"{spec.debian_source}={spec.debian_version}"],
                          capture_output=True, text=True, cwd=work, check=False)
    orig = f"{spec.debian_source}_{spec.version}.orig.tar.gz"
    found = re.search(rf"'(\S+/{re.escape(orig)})' {re.escape(orig)} \d+ SHA256:([0-9a-f]+)",
                      proc.stdout)
    if proc.returncode != 0 or found is None:
        raise BuildError(f"apt-get source --print-uris {spec.debian_source}="
                         f"{spec.debian_version} found no {orig}: "
                         f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    uri, listed = found.groups()
    if listed != spec.orig_sha256:
        raise BuildError(f"Debian lists {orig} with sha256 {listed}, pinned {spec.orig_sha256}")
    tarball = work / orig
    with urllib.request.urlopen(uri, timeout=120) as response:  # noqa: S310 - apt's own URI
        tarball.write_bytes(response.read())
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != spec.orig_sha256:
        raise BuildError(f"{orig} downloaded with sha256 {digest}, pinned {spec.orig_sha256}")
    with tarfile.open(tarball) as tar:
        tar.extractall(work / "kcat-src", filter="data")
    dirs = [p for p in (work / "kcat-src").iterdir() if p.is_dir()]
    if len(dirs) != 1:
        raise BuildError(f"{orig} unpacked to {[p.name for p in dirs]}, expected one folder")
    return dirs[0]


def _debian_entries(root: Path = Path("/etc/apt"), codename: str = "",
                    ) -> list[tuple[str, str, str]]:
    """(uri, suite, keyring) of this machine's apt entries for its own Debian release's main
    suite (deb822 .sources and one-line .list files); other vendors' entries are skipped."""
    codename = codename or _os_release().get("VERSION_CODENAME", "")
    if not codename:
        raise BuildError("/etc/os-release names no VERSION_CODENAME: not a Debian machine?")
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    entries: list[tuple[str, str, str]] = []
    for path in sorted(root.glob("sources.list.d/*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith(("#", " ")))
            values = {k.strip(): v.split() for k, v in fields.items()}
            if (codename in values.get("Suites", []) and "main" in values.get("Components", [])
                    and "deb" in values.get("Types", []) and values.get("URIs")):
                signed = (values.get("Signed-By") or [keyring])[0]
                entries.append((values["URIs"][0], codename, signed))
    for path in [root / "sources.list", *sorted(root.glob("sources.list.d/*.list"))]:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if len(parts) >= 4 and parts[0] == "deb" and parts[2] == codename \
                        and "main" in parts[3:]:
                    entries.append((parts[1], codename, keyring))
    if not entries:
        raise BuildError(f"no apt entry for Debian {codename} main in {root}: cannot find "
                         "kcat's source package")
    return entries


def _os_release() -> dict[str, str]:
    text = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    return {k: v.strip('"') for k, _, v in (line.partition("=") for line in text.splitlines())}
