"""Running uv's resolver (``uv pip compile``) and reading what it says.

The adapter writes the requirements and constraints to a private temporary directory, runs
the ``uv`` binary shipped by the ``uv`` Python package for the image's Python version and
platform (``--python-version``, ``--python-platform``), against exactly the indexes given
(``--index-url``, ``--extra-index-url``, ``--find-links``, ``--index-strategy``,
``--prerelease allow``), without user configuration files and without Python downloads, and
returns a :class:`CompileResult`: the pinned set on success, the resolver's own words on
failure. It never prints; failure to run uv at all is a :class:`ResolveError`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from packaging.utils import NormalizedName, canonicalize_name

from pinguard.errors import IndexUnreachable, ResolveError
from pinguard.repair.resolve.index import TargetEnvironment

INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")


@dataclass(frozen=True, slots=True)
class IndexOptions:
    """Where packages come from, as a pip or uv command line says it."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    index_strategy: str | None = None
    prerelease: bool = False

    def merged(self, other: IndexOptions) -> IndexOptions:
        """``self`` with ``other`` added: lists are joined, and when both name a main index
        ``self``'s stays the main one and ``other``'s becomes an extra index (not dropped)."""
        demoted = (
            (other.index_url,)
            if self.index_url and other.index_url and other.index_url != self.index_url
            else ()
        )
        main = self.index_url or other.index_url
        extras = _uniq((*self.extra_index_urls, *demoted, *other.extra_index_urls))
        return IndexOptions(
            index_url=main,
            extra_index_urls=tuple(u for u in extras if u != main),
            find_links=_uniq((*self.find_links, *other.find_links)),
            no_index=self.no_index or other.no_index,
            index_strategy=self.index_strategy or other.index_strategy,
            prerelease=self.prerelease or other.prerelease,
        )

    def for_tool(self, tool: str) -> IndexOptions:
        """These options as ``tool`` ("pip" or "uv") applies them, spelled for uv.

        pip merges every index and takes the best version found on any of them, which is
        uv's ``--index-strategy unsafe-best-match``; uv's own default (first-index) is kept
        for uv command lines, and a strategy the command names always wins.
        """
        if tool == "pip" and self.index_strategy is None and self.extra_index_urls:
            return replace(self, index_strategy="unsafe-best-match")
        return self

    @property
    def index_urls(self) -> tuple[str, ...]:
        """Every simple index, main first (none with ``--no-index``)."""
        if self.no_index:
            return ()
        main = self.index_url or "https://pypi.org/simple/"
        return (main, *self.extra_index_urls)

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        elif self.index_url:
            args += ["--index-url", self.index_url]
        if not self.no_index:
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for loc in self.find_links:
            args += ["--find-links", loc]
        if self.index_strategy:
            if self.index_strategy not in INDEX_STRATEGIES:
                raise ResolveError(
                    f"unknown index strategy {self.index_strategy!r}; "
                    f"choose one of {', '.join(INDEX_STRATEGIES)}"
                )
            args += ["--index-strategy", self.index_strategy]
        if self.prerelease:
            args += ["--prerelease", "allow"]
        return args


def _uniq(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What one resolver run said."""

    ok: bool
    pins: tuple[tuple[NormalizedName, str], ...]  # sorted name, version on success
    output: str  # the resolver's stderr (its explanation on failure)
    command: tuple[str, ...]
    resolver: str = "uv"

    def pinned(self) -> dict[NormalizedName, str]:
        return dict(self.pins)


def uv_bin() -> str:
    """Path of the ``uv`` binary from the ``uv`` package (or PATH), else ResolveError."""
    try:
        import uv

        path: str = uv.find_uv_bin()
        return path
    except (ImportError, FileNotFoundError):
        pass
    import shutil

    found = shutil.which("uv")
    if found is None:
        raise ResolveError("uv is not installed (it is a dependency of pinguard): pip install uv")
    return found


def uv_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment uv runs with: no managed-Python downloads, no stray config."""
    env = dict(os.environ)
    for key in (
        "UV_CONSTRAINT",
        "UV_OVERRIDE",
        "PIP_CONSTRAINT",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
    ):
        env.pop(key, None)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["NO_COLOR"] = "1"
    if extra:
        env.update(extra)
    return env


def target_args(target: TargetEnvironment) -> list[str]:
    args: list[str] = []
    if target.python_version:
        args += ["--python-version", target.python_version]
    if target.python_platform:
        args += ["--python-platform", target.python_platform]
    return args


def parse_pins(text: str) -> tuple[tuple[NormalizedName, str], ...]:
    """``name==version`` lines of a compiled requirements file, sorted by name."""
    pins: dict[NormalizedName, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "# \t-":
            continue
        head = line.split(";", 1)[0].split("\\", 1)[0].strip()
        if "==" in head:
            name, _, version = head.partition("==")
            name = name.split("[", 1)[0].strip()
            pins[canonicalize_name(name)] = version.strip().lstrip("=")
    return tuple(sorted(pins.items()))


def run(
    command: Sequence[str], *, timeout: float, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=uv_env(),
            cwd=cwd,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ResolveError(f"could not run {command[0]!r}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ResolveError(f"{Path(command[0]).name} did not finish in {timeout:.0f}s") from exc


# uv: "error sending request for url (https://host/simple/six/)" then the causes, one a line
_UV_URL = re.compile(r"error sending request for url \((?P<url>[^)\s]+)\)")
# pip: "HTTPSConnectionPool(host='host', port=443): Max retries exceeded ... NewConnectionError"
_PIP_HOST = re.compile(r"ConnectionPool\(host='(?P<host>[^']+)', port=(?P<port>\d+)\)")
_NETWORK_WORDS = (
    "dns error",
    "tcp connect error",
    "client error (Connect)",
    "operation timed out",
    "Connection refused",
    "Name or service not known",
    "NewConnectionError",
    "Max retries exceeded",
)


def network_failure(output: str) -> IndexUnreachable | None:
    """The ``IndexUnreachable`` a resolver's output describes (uv's or pip's wording), naming
    the host and the last cause; None when the output is not about reaching an index."""
    if not any(word in output for word in _NETWORK_WORDS):
        return None
    match = _UV_URL.search(output)
    if match is not None:
        url = match.group("url")
        host = urlsplit(url).netloc or url
    else:
        pip = _PIP_HOST.search(output)
        if pip is None:
            return None
        url = ""
        host = f"{pip.group('host')}:{pip.group('port')}"
    causes = [
        line.strip().removeprefix("cause:").strip()
        for line in output.splitlines()
        if line.strip().startswith("cause:")
    ]
    why = causes[-1] if causes else "network error"
    where = f" (fetching {url})" if url else ""
    return IndexUnreachable(f"could not reach the package index {host}{where}: {why}")


def compile_requirements(
    requirements: Sequence[str],
    constraints: Sequence[str] = (),
    *,
    index: IndexOptions,
    target: TargetEnvironment,
    overrides: Sequence[str] = (),
    timeout: float = 300.0,
) -> CompileResult:
    """Resolve ``requirements`` under ``constraints`` (and ``overrides``) with uv."""
    with tempfile.TemporaryDirectory(prefix="pinguard-uv-") as tmp:
        req = Path(tmp, "requirements.in")
        req.write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
        command = [
            uv_bin(),
            "pip",
            "compile",
            str(req),
            "--no-config",
            "--no-header",
            "--no-annotate",
            "--color",
            "never",
            "--python",
            sys.executable,
            "--cache-dir",
            str(Path(tmp, "cache")),
            *target_args(target),
            *index.uv_args(),
        ]
        if constraints:
            cons = Path(tmp, "constraints.txt")
            cons.write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
            command += ["--constraint", str(cons)]
        if overrides:
            over = Path(tmp, "overrides.txt")
            over.write_text("".join(f"{o}\n" for o in overrides), encoding="utf-8")
            command += ["--override", str(over)]
        proc = run(command, timeout=timeout, cwd=tmp)
    if proc.returncode == 0:
        return CompileResult(True, parse_pins(proc.stdout), proc.stderr, tuple(command))
    unreachable = network_failure(proc.stderr)
    if unreachable is not None:
        raise unreachable
    if "No solution found" in proc.stderr or "unsatisfiable" in proc.stderr:
        return CompileResult(False, (), proc.stderr, tuple(command))
    raise ResolveError(f"uv pip compile failed: {proc.stderr.strip() or proc.stdout.strip()}")


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What installing a lock file into a throwaway target directory did."""

    ok: bool
    installed: tuple[tuple[NormalizedName, str], ...]  # sorted name, version found afterwards
    output: str
    command: tuple[str, ...]


def _without_requires_python(path: Path) -> str:
    """A lock's text without its ``requires-python`` keys (the lock's own and its packages')."""
    import tomlkit
    import tomlkit.exceptions

    try:
        text = path.read_text(encoding="utf-8")
        doc = tomlkit.parse(text)
    except OSError as exc:
        raise ResolveError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    except tomlkit.exceptions.TOMLKitError as exc:
        raise ResolveError(f"{str(path)!r} is not valid TOML: {exc}") from exc
    doc.pop("requires-python", None)
    for package in doc.get("packages", []):
        package.pop("requires-python", None)
    return tomlkit.dumps(doc)


def install_lock(
    lock_file: str | os.PathLike[str], *, target: TargetEnvironment, timeout: float = 600.0
) -> InstallResult:
    """Install a pylock.toml with ``uv pip install --target`` into a temporary directory for
    ``target``'s Python and platform (a copy without ``requires-python``, which uv checks
    against the host's interpreter), and read back which distributions landed there."""
    from importlib import metadata

    with tempfile.TemporaryDirectory(prefix="pinguard-lock-") as tmp:
        site = Path(tmp, "site")
        # uv checks a lock's requires-python against the interpreter that runs it, never
        # against --python-version: a 3.12 lock would not install from a 3.11 host. The
        # copy drops it; the lock's environments marker still names the target's Python.
        copy = Path(tmp, "pylock.toml")
        copy.write_text(_without_requires_python(Path(lock_file)), encoding="utf-8")
        command = [
            uv_bin(),
            "pip",
            "install",
            "--no-config",
            "--color",
            "never",
            "--python",
            sys.executable,
            "--cache-dir",
            str(Path(tmp, "cache")),
            "--target",
            str(site),
            *target_args(target),
            "-r",
            str(copy),
        ]
        proc = run(command, timeout=timeout, cwd=tmp)
        installed = sorted(
            (canonicalize_name(d.metadata["Name"]), d.version)
            for d in metadata.distributions(path=[str(site)])
        )
    return InstallResult(
        proc.returncode == 0, tuple(installed), (proc.stderr + proc.stdout).strip(), tuple(command)
    )
