"""Every subcommand, run as a CI gate or an operator runs it, with the environment broken: a
missing file, an unreachable host, a name that does not resolve, no broker listening, no
optional package installed, Ctrl-C while the command is still importing. Each must end in
one error line naming the cause and a documented non-zero exit code, fast, and no output may
hold a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import pytest

from pinguard.errors import EXIT_FINDINGS, EXIT_IMAGE, EXIT_INTERRUPTED, EXIT_USAGE
from pinguard.testing.demo import build_demo
from tests.infra.keys import ec_key_pair

#: a name RFC 6761 guarantees never resolves: a DNS failure without any traffic leaving
UNRESOLVABLE = "registry.pinguard-test.invalid"

#: runs pinguard as the console script does, with the modules named (comma-separated) by the
#: first argument made unimportable: celery and redis for pip install . without [fleet],
#: everything outside the core install for pip install . without any extra
RUNNER = (
    "import sys\n"
    "for name in filter(None, sys.argv.pop(1).split(',')):\n"
    "    sys.modules[name] = None\n"
    "from pinguard.cli import main\n"
    "sys.argv[0] = 'pinguard'\n"
    "raise SystemExit(main())\n"
)
FLEET_MODULES = ("celery", "kombu", "redis")

#: the longest any of these may take: each fails on something known at once, or on a host
#: that answers "refused" or a name that does not resolve, which is never worth minutes
PROMPT_S = 30.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the demo image, a Dockerfile, a policy and a signing key pair."""
    root = tmp_path_factory.mktemp("broken")
    build_demo(root / "demo.tar", tag="2026-11-29")
    (root / "Dockerfile").write_text("FROM scratch\nRUN pip install torch\n")
    (root / "policy.toml").write_text('name = "broken-env"\n')
    ec_key_pair(root, "key")
    return root


def run(
    workdir: Path, *argv: str, extras: bool = True, blocked: Sequence[str] = ()
) -> tuple[int, str, str, float]:
    """``pinguard argv...`` in ``workdir`` as a subprocess: (exit code, stdout, stderr, s),
    without the fleet extra's modules unless ``extras``, and never with ``blocked``."""
    hidden = [*blocked, *(() if extras else FLEET_MODULES)]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, ",".join(hidden), *argv],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=PROMPT_S * 4,
        env={**os.environ, "HOME": str(workdir), "XDG_CACHE_HOME": str(workdir / "cache")},
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def assert_one_clean_error(
    code: int, out: str, err: str, elapsed: float, allowed: set[int], *cause: str
) -> None:
    """No traceback anywhere, a documented non-zero exit code, an error line naming the
    cause, and no waiting on what cannot answer."""
    assert "Traceback" not in out + err, err
    assert code in allowed, (code, out, err)
    # gate writes its report (lint, then the image) and names what could not be read in it
    errors = [
        line
        for line in (err + out).splitlines()
        if line.startswith("pinguard: error:") or ": cannot be read:" in line
    ]
    assert errors, err
    for word in cause:
        assert word in errors[0], (word, errors)
    assert elapsed < PROMPT_S, (elapsed, err)


# --------------------------------------------------------------------------- missing files

MISSING_FILE_CASES: list[tuple[str, list[str], str]] = [
    ("audit", ["audit", "missing.tar"], "missing.tar"),
    ("audit policy", ["audit", "demo.tar", "--policy", "nope.toml"], "nope.toml"),
    ("compare", ["compare", "demo.tar", "./missing.tar"], "missing.tar"),
    ("policy check", ["policy", "check", "nope.toml"], "nope.toml"),
    ("constraints", ["constraints", "missing.tar", "-o", "c.txt"], "missing.tar"),
    ("constraints check", ["constraints", "check", "nope.txt"], "nope.txt"),
    ("plan", ["plan", "./missing.tar", "--", "pip", "install", "x"], "missing.tar"),
    ("lint", ["lint", "NoDockerfile"], "NoDockerfile"),
    ("gate dockerfile", ["gate", "--dockerfile", "NoDockerfile", "--image", "demo.tar"], "NoD"),
    ("gate image", ["gate", "--dockerfile", "Dockerfile", "--image", "./missing.tar"], "missing"),
    (
        "attest key",
        ["attest", "demo.tar", "--policy", "policy.toml", "--key", "nokey.pem", "-o", "s.json"],
        "nokey.pem",
    ),
    (
        "attest image",
        ["attest", "./missing.tar", "--policy", "policy.toml", "--key", "key.pem", "-o", "s.json"],
        "missing",
    ),
    ("verify key", ["verify", "demo.tar", "--key", "nokey.pub"], "nokey.pub"),
    ("verify image", ["verify", "./missing.tar", "--key", "key.pub"], "missing.tar"),
    ("probe", ["probe", "./missing.tar", "--import", "torch"], "missing.tar"),
    ("fleet report", ["fleet", "report", "--results", "no-results"], "no-results"),
    ("fleet run file", ["fleet", "run", "--file", "refs.txt", "--results", "r"], "refs.txt"),
    ("fleet receive", ["fleet", "receive", "--token-file", "no-token"], "no-token"),
]


@pytest.mark.parametrize(
    ("argv", "cause"),
    [pytest.param(argv, cause, id=name) for name, argv, cause in MISSING_FILE_CASES],
)
def test_a_missing_file_is_one_line_naming_it(workdir: Path, argv: list[str], cause: str) -> None:
    """A path that does not exist fails at once with its name; nothing asks a registry."""
    code, out, err, elapsed = run(workdir, *argv)
    assert_one_clean_error(code, out, err, elapsed, {EXIT_USAGE, EXIT_IMAGE}, cause)


# --------------------------------------------------------------------------- hosts


def host_cases() -> list[tuple[str, list[str], str]]:
    refused = f"127.0.0.1:{closed_port()}"
    cases: list[tuple[str, list[str], str]] = []
    for host in (refused, UNRESOLVABLE):
        ref = f"docker://{host}/team/serving:1"
        cases += [
            (f"audit {host}", ["audit", ref, "--no-cache"], host),
            (f"compare {host}", ["compare", "demo.tar", ref, "--no-cache"], host),
            (f"constraints {host}", ["constraints", ref, "--no-cache", "-o", "c.txt"], host),
            (f"gate {host}", ["gate", "--dockerfile", "Dockerfile", "--image", ref], host),
            (
                f"attest {host}",
                ["attest", ref, "--policy", "policy.toml", "--key", "key.pem", "-o", "s.json"],
                host,
            ),
            (f"verify {host}", ["verify", ref, "--key", "key.pub"], host),
        ]
    return cases


@pytest.mark.parametrize(
    ("argv", "cause"),
    [pytest.param(argv, cause, id=name) for name, argv, cause in host_cases()],
)
def test_an_unreachable_host_is_one_line_naming_it(
    workdir: Path, argv: list[str], cause: str
) -> None:
    """A registry that refuses connections, or whose name does not resolve: exit 3, the host
    named, no retries worth waiting for."""
    code, out, err, elapsed = run(workdir, *argv)
    assert_one_clean_error(code, out, err, elapsed, {EXIT_IMAGE}, cause)


def test_an_unreachable_index_is_one_line_naming_it(workdir: Path) -> None:
    """`plan` against an index on a closed port: exit 3 naming the index's host."""
    host = f"127.0.0.1:{closed_port()}"
    code, out, err, elapsed = run(
        workdir, "plan", "demo.tar", "--index-url", f"http://{host}/simple",
        "--", "pip", "install", "no-such-package",
    )  # fmt: skip
    assert_one_clean_error(code, out, err, elapsed, {EXIT_IMAGE, EXIT_FINDINGS}, host)


# --------------------------------------------------------------------------- the fleet's parts


def test_no_broker_listening_is_one_line_naming_it(workdir: Path) -> None:
    """`fleet run` and `worker` with nothing on the broker's port: exit 3, the broker named,
    in seconds (celery on its own retries for 20 s and prints 139 lines)."""
    broker = f"redis://127.0.0.1:{closed_port()}/0"
    for argv in (
        ["fleet", "run", "demo.tar", "--broker", broker, "--results", "results"],
        ["worker", "--broker", broker, "--results", "results"],
    ):
        code, out, err, elapsed = run(workdir, *argv)
        assert_one_clean_error(code, out, err, elapsed, {EXIT_IMAGE}, broker)


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--broker", "redis://127.0.0.1:6379/0", "--results", "r"],
        ["fleet", "run", "demo.tar", "--broker", "redis://127.0.0.1:6379/0", "--results", "r"],
        ["fleet", "receive", "--token-file", "policy.toml", "--broker", "redis://127.0.0.1:1/0"],
    ],
    ids=["worker", "fleet run", "fleet receive"],
)
def test_the_fleet_without_its_extra_names_the_extra(workdir: Path, argv: list[str]) -> None:
    """Installed without [fleet]: one line saying what to install, exit 2."""
    code, out, err, elapsed = run(workdir, *argv, extras=False)
    assert_one_clean_error(code, out, err, elapsed, {EXIT_USAGE}, "pinguard[fleet]")


def test_a_redis_cache_without_redis_py_is_a_note_and_the_audit_goes_on(workdir: Path) -> None:
    """`audit --cache redis://...` without redis-py: a note, then the audit without the
    shared cache (the demo's downgrade: exit 1), as docs/fleet.md promises."""
    code, out, err, _ = run(
        workdir, "audit", "demo.tar", "--cache-dir", "layer-cache",
        "--cache", "redis://127.0.0.1:1/0", "-f", "json", extras=False,
    )  # fmt: skip
    assert "Traceback" not in out + err, err
    assert code == EXIT_FINDINGS, err
    doc = json.loads(out)
    assert any("pinguard[fleet]" in note for note in doc["notes"]), doc["notes"]
    assert any(f["package"] == "nvidia-nccl-cu13" for f in doc["findings"])


# --------------------------------------------------------------------------- the core install

ROOT = Path(__file__).resolve().parents[2]


def core_distributions() -> set[str]:
    """What ``pip install pinguard`` (no extra) installs: pyproject's dependencies and theirs,
    with markers and requested extras evaluated here, as canonical names."""
    import tomlkit
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomlkit.parse((ROOT / "pyproject.toml").read_text()).unwrap()["project"]
    wanted: list[tuple[str, frozenset[str]]] = [
        (t, frozenset({""})) for t in project["dependencies"]
    ]
    seen: set[tuple[str, str]] = set()
    names = {"pinguard"}
    while wanted:
        text, extras = wanted.pop()
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(req.name)
        new = {(name, e) for e in {"", *req.extras}} - seen
        if new:
            seen |= new
            names.add(name)
            asked = frozenset(e for _, e in new)
            wanted += [(t, asked) for t in metadata.requires(name) or ()]
    return names


def outside_core() -> list[str]:
    """The top-level modules of every installed distribution the core install would not
    bring (pip and setuptools come with any virtual environment): with these unimportable a
    subprocess is pinguard as ``pip install pinguard`` leaves it."""
    from packaging.utils import canonicalize_name

    keep = core_distributions() | {"pip", "setuptools", "wheel"}
    return sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if module.isidentifier()
        and module not in sys.stdlib_module_names
        and not any(canonicalize_name(d) in keep for d in dists)
    )


@pytest.fixture(scope="module")
def light() -> list[str]:
    blocked = outside_core()
    # the test means something only where the extras are installed to be hidden
    for module in ("cyclonedx", "spdx_tools", "jsonschema", "celery"):
        assert module in blocked, (module, blocked)
    return blocked


def sbom_error(command: str, fmt: str) -> str:
    library, module = {"cyclonedx": ("cyclonedx-python-lib", "cyclonedx")}.get(
        fmt, ("spdx-tools", "spdx_tools")
    )
    return (
        f"pinguard: error: {command} -f {fmt} needs {library}, which is not installed "
        f"(no module {module!r}): pip install 'pinguard[sbom]'"
    )


@pytest.mark.parametrize("fmt", ["cyclonedx", "spdx"])
@pytest.mark.parametrize("command", ["audit", "predict"])
def test_an_sbom_without_its_extra_fails_before_any_work(
    workdir: Path, light: list[str], command: str, fmt: str
) -> None:
    """Installed without [sbom]: `-f cyclonedx` / `-f spdx` is one line naming the library,
    its module and the extra, exit 2, before the image is read: the registry named here
    refuses connections, which would be exit 3 naming it."""
    ref = f"docker://127.0.0.1:{closed_port()}/team/serving:1"
    argv = (
        ["audit", ref]
        if command == "audit"
        else ["predict", "Dockerfile", "--base", f"scratch={ref}"]
    )
    code, out, err, elapsed = run(workdir, *argv, "-f", fmt, blocked=light)
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.splitlines() == [sbom_error(command, fmt)]
    assert elapsed < PROMPT_S


def test_an_sbom_without_its_extra_fails_even_with_a_warm_report(
    workdir: Path, light: list[str]
) -> None:
    """A cold audit with the extra leaves its CycloneDX report in the result cache; the same
    command without the extra still fails up front (exit 2), not answered from the cache."""
    argv = ["audit", "demo.tar", "--cache-dir", "warm-cache", "-f", "cyclonedx"]
    code, out, err, _ = run(workdir, *argv)
    assert code == EXIT_FINDINGS, err
    assert json.loads(out)["bomFormat"] == "CycloneDX"
    code, again, err, _ = run(workdir, *argv)
    assert (code, again) == (EXIT_FINDINGS, out), err  # answered warm, the same bytes
    code, out, err, _ = run(workdir, *argv, blocked=light)
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.splitlines() == [sbom_error("audit", "cyclonedx")]


def test_an_sbom_library_that_cannot_import_is_one_line(workdir: Path) -> None:
    """cyclonedx-python-lib present but one of its own dependencies gone (a broken install):
    the audit runs, then the report is one line naming the module that failed, exit 2."""
    code, out, err, elapsed = run(
        workdir, "audit", "demo.tar", "-f", "cyclonedx", blocked=["py_serializable"]
    )
    assert "Traceback" not in out + err, err
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.splitlines() == [
        "pinguard: error: -f cyclonedx needs cyclonedx-python-lib, which cannot be imported "
        "(no module 'py_serializable'): pip install 'pinguard[sbom]'"
    ]
    assert elapsed < PROMPT_S


@pytest.mark.parametrize("fmt", ["table", "json", "sarif", "junit", "markdown", "html"])
def test_every_other_format_works_without_any_extra(
    workdir: Path, light: list[str], fmt: str
) -> None:
    """With only the core install importable, the audit writes every non-SBOM format: the
    demo's NCCL downgrade found, exit 1."""
    code, out, err, _ = run(workdir, "audit", "demo.tar", "--no-cache", "-f", fmt, blocked=light)
    assert "Traceback" not in out + err, err
    assert code == EXIT_FINDINGS, err
    assert "nvidia-nccl-cu13" in out, out[:2000]
    if fmt in ("json", "sarif"):
        json.loads(out)


def test_the_gate_and_its_neighbours_work_without_any_extra(
    workdir: Path, light: list[str]
) -> None:
    """compare, constraints, gate, attest and verify with only the core install: each does
    its work and ends with its documented code, no traceback."""
    cases: list[tuple[list[str], int, str]] = [
        (["compare", "demo.tar", "demo.tar", "-f", "json"], 0, '"pinguard/compare/v1"'),
        (["constraints", "demo.tar", "-o", "c.txt"], 0, ""),
        (["gate", "--dockerfile", "Dockerfile", "--image", "demo.tar"], 1, "nvidia-nccl-cu13"),
        (
            ["attest", "demo.tar", "--policy", "policy.toml", "--key", "key.pem", "-o", "s.json"],
            1,
            "",
        ),
        (["verify", "demo.tar", "--key", "key.pub", "--attestation", "s.json"], 1, ""),
    ]
    for argv, want, shown in cases:
        code, out, err, _ = run(workdir, *argv, blocked=light)
        assert "Traceback" not in out + err, (argv, err)
        assert code == want, (argv, code, out, err)
        assert shown in out, (argv, out)
    assert "nvidia-nccl-cu13" in (workdir / "c.txt").read_text()
    assert (
        json.loads((workdir / "s.json").read_text())["payloadType"]
        == "application/vnd.in-toto+json"
    )


# --------------------------------------------------------------------------- Ctrl-C, version

#: pinguard run with Ctrl-C as a terminal delivers it, and with the import of the audit
#: subcommand's module held until the test has sent SIGINT
SLOW_IMPORT = (
    "import importlib.abc, signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "class Slow(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'pinguard.cli.audit':\n"
    "            print('importing', file=sys.stderr, flush=True)\n"
    "            time.sleep(30)\n"
    "        return None\n"
    "sys.meta_path.insert(0, Slow())\n"
    "from pinguard.cli import main\n"
    "raise SystemExit(main())\n"
)


def test_ctrl_c_while_the_subcommand_imports_exits_130(workdir: Path) -> None:
    """SIGINT in the first moments, while the subcommand's modules load: one line, 130."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_IMPORT, "audit", "demo.tar"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "importing"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in out + err
    assert err.strip().splitlines() == ["pinguard: error: interrupted"]


def test_version_is_a_subcommand_as_in_trivy_and_syft(workdir: Path) -> None:
    """`pinguard version` prints what `pinguard --version` prints, exit 0."""
    code, out, err, _ = run(workdir, "version")
    assert (code, err) == (0, "")
    code2, out2, _, _ = run(workdir, "--version")
    assert code2 == 0
    assert out == out2
    assert out.startswith("pinguard ")


def test_the_readmes_one_line_redis_starts_one(tmp_path: Path) -> None:
    """The README's one-line local Redis (on a free port here) starts and answers PING."""
    import re

    import redis

    from tests.infra.tools import require_tool

    require_tool("redis-server")
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    match = re.search(r"`(redis-server [^`]*)`", readme)
    assert match, "the README gives no redis-server line"
    port = closed_port()
    line = match.group(1).replace("6379", str(port))
    subprocess.run(["sh", "-c", line], cwd=tmp_path, check=True, timeout=30)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                assert client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the README's redis-server never answered"
                time.sleep(0.1)
    finally:
        with contextlib.suppress(redis.ConnectionError):  # shutdown drops the connection
            client.shutdown(nosave=True)
