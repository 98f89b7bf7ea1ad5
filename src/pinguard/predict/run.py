"""Predicting one ``RUN`` step: what each of its commands does to the Python environments.

The step's simple commands are read as the lint reads them (`pinguard.buildfile.lint.
run_commands`: ARG/ENV values, inline assignments, ``export``, heredoc scripts) and taken in
order, with ``cd`` followed. A pip or uv install is answered by the resolver ``pinguard plan``
uses (`pinguard.repair.plan.plan_install`: a uv dry run against the environment's metadata,
for the target platform and its Python) with the command's own index options, requirement
and constraint files (read from the build context through `reqfiles`) and the environment
the command acts on (`interpreters`); ``pip uninstall`` removes what it names; ``python -m
venv`` and ``uv venv`` make an environment (with ensurepip's seeds where their versions are
known). Commands that leave Python environments alone (``echo``, ``mkdir``, ``pip check``,
``pinguard guard``, an ``apt-get install`` that names no Python package, ...) change nothing.
Anything else (a script, ``python -c``, ``conda``, a write into an environment, an option
that installs elsewhere) makes the step ``unpredicted``, with the reason; a resolution that
fails means the build would stop there.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.buildfile.dockerfile import Instruction
from pinguard.buildfile.lint import run_commands
from pinguard.buildfile.pipcli import (
    ASSIGNMENT,
    InstallCommand,
    basename,
    is_guard_call,
    pip_invocation,
    read_install,
    strip_wrappers,
)
from pinguard.catalog.python import with_environments
from pinguard.errors import IndexUnreachable, ResolveError, UsageError
from pinguard.models import Environment, Platform, Snapshot
from pinguard.predict.interpreters import (
    Interpreter,
    find_interpreter,
    interpreters,
    seeded,
    venv_seeds,
)
from pinguard.predict.pipcheck import check_with_pip, same_install
from pinguard.predict.reqfiles import ContextFiles, RequirementSet, read_requirements
from pinguard.repair.plan import Plan, plan_install
from pinguard.repair.pylock import glibc_of
from pinguard.repair.resolve import IndexOptions, InstallReplay, SimpleIndex
from pinguard.target import parse_requirement

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_PIP = re.compile(r"^pip(3(\.\d+)?)?$")
#: Commands that change no Python environment, whatever their arguments (paths inside an
#: environment are checked separately for the file commands below).
HARMLESS = frozenset(
    {
        ":",
        "[",
        "[[",
        "echo",
        "printf",
        "true",
        "false",
        "test",
        "mkdir",
        "rmdir",
        "ls",
        "cat",
        "head",
        "tail",
        "wc",
        "grep",
        "egrep",
        "fgrep",
        "sort",
        "uniq",
        "cut",
        "tr",
        "sed",
        "awk",
        "gawk",
        "chmod",
        "chown",
        "chgrp",
        "touch",
        "useradd",
        "groupadd",
        "adduser",
        "addgroup",
        "usermod",
        "groupmod",
        "id",
        "whoami",
        "sleep",
        "date",
        "env",
        "export",
        "set",
        "unset",
        "umask",
        "ldconfig",
        "locale-gen",
        "localedef",
        "curl",
        "wget",
        "git",
        "which",
        "type",
        "hash",
        "nvidia-smi",
        "nproc",
        "uname",
        "tee",
        "find",
        "du",
        "df",
        "file",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "stat",
        "cmp",
        "diff",
        "md5sum",
        "sha256sum",
        "sha512sum",
        "base64",
        "gzip",
        "gunzip",
        "zstd",
        "xz",
        "bzip2",
        "update-ca-certificates",
        "dpkg-reconfigure",
        "gpg",
        "apt-key",
        "mktemp",
        "ln",
        "cp",
        "mv",
        "rm",
        "tar",
        "unzip",
        "install",
    }
)
#: File commands whose path arguments must stay out of every environment.
_FILE_COMMANDS = frozenset({"rm", "mv", "cp", "ln", "tar", "unzip", "install", "touch"})
_PACKAGE_MANAGERS = {
    "apt-get": ("install", "remove", "purge", "reinstall"),
    "apt": ("install", "remove", "purge", "reinstall"),
    "aptitude": ("install", "remove", "purge", "reinstall"),
    "apk": ("add", "del"),
    "dnf": ("install", "remove", "reinstall", "erase"),
    "yum": ("install", "remove", "reinstall", "erase"),
    "microdnf": ("install", "remove", "reinstall"),
    "zypper": ("install", "in", "remove", "rm"),
}
_UPGRADES = frozenset({"upgrade", "dist-upgrade", "full-upgrade", "autoremove"})
_HARMLESS_PIP = frozenset(
    {
        "check",
        "list",
        "freeze",
        "show",
        "download",
        "wheel",
        "config",
        "cache",
        "help",
        "debug",
        "inspect",
        "index",
        "hash",
        "search",
        "compile",
        "tree",
    }
)
_ELSEWHERE = ("-t", "--target", "--prefix", "--root", "--user", "--python", "-p")


@dataclass(frozen=True, slots=True)
class StageView:
    """What a ``RUN`` step reads of its stage."""

    snapshot: Snapshot
    venvs: Mapping[str, str | None]  # prefix -> Python of every virtual environment made
    files: ContextFiles
    workdir: str
    user: str
    platform: Platform | None
    mounts: ContextFiles = field(default_factory=ContextFiles)  # RUN --mount binds


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one ``RUN`` step did, as predicted; ``reason`` non-empty: unpredicted."""

    snapshot: Snapshot
    venvs: Mapping[str, str | None]
    files: ContextFiles
    resolver: str = ""
    reason: str = ""
    fails: bool = False  # the build would stop at this step
    notes: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()  # pip's resolver, asked in the background


#: pip's own resolver on one install, asked in the background: ``("agree" | "note" |
#: "differ", text)``, "differ" making the step unpredicted with ``text`` as the reason.
Check = Future[tuple[str, str]]


class Unpredictable(Exception):
    """A command the prediction cannot model; the message is the reason."""

    def __init__(self, reason: str, *, fails: bool = False) -> None:
        super().__init__(reason)
        self.fails = fails


class Resolver:
    """The resolver every predicted install asks: ``plan_install`` (a uv dry run), with one
    index client per set of indexes and uv's cache kept for the whole run; with
    ``pip_check``, pip's own resolver asked about each pip step too, in the background (a
    step's check needs only the state before it, so the checks of all steps run side by side
    while uv walks on). ``close`` waits for them and removes the scratch directory."""

    def __init__(
        self, cache_dir: Path | None = None, timeout: float = 300.0, *, pip_check: bool = True
    ) -> None:
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.pip_check = pip_check  # ask pip's own resolver too, for pip steps
        self._clients: dict[tuple[tuple[str, ...], tuple[str, ...]], SimpleIndex] = {}
        self._version: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._files = 0

    def scratch_file(self, name: str, text: str) -> str:
        """A file that lives until ``close`` (a constraints file a later check reads)."""
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="pinguard-predict-")
        self._files += 1
        path = Path(self._scratch.name, f"{self._files}-{name}")
        path.write_text(text, encoding="utf-8")
        return str(path)

    def submit_check(
        self,
        env: Environment,
        replay: InstallReplay,
        platform: Platform | None,
        glibc: tuple[int, int] | None,
        also: Sequence[Environment],
        uv_install: Sequence[tuple[NormalizedName, str]],
        image_pip: str | None,
    ) -> Check:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pip-check")
        return self._pool.submit(
            _pip_verdict, env, replay, platform, glibc, also, uv_install, image_pip, self.timeout
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def __enter__(self) -> Resolver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def version(self) -> str:
        if self._version is None:
            from pinguard.repair.resolve.uv import uv_bin

            try:
                out = subprocess.run(
                    [uv_bin(), "--version"], capture_output=True, text=True, timeout=60, check=False
                ).stdout.split()
            except (OSError, subprocess.SubprocessError):
                out = []
            self._version = out[1] if len(out) > 1 else "?"
        return self._version

    def describe(self, tool: str) -> str:
        models = (
            "pip (extra indexes merged as --index-strategy unsafe-best-match, -U as "
            "--upgrade-package)"
            if tool == "pip"
            else "uv pip"
        )
        return f"uv {self.version} pip install --dry-run, modelling {models}"

    def plan(
        self,
        env: Environment,
        replay: InstallReplay,
        platform: Platform | None,
        also: Sequence[Environment],
        glibc: tuple[int, int] | None = None,
    ) -> Plan:
        opts = IndexOptions().merged(replay.index)
        key = (opts.index_urls, opts.find_links)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = SimpleIndex(opts.index_urls, opts.find_links)
        return plan_install(
            env,
            replay,
            platform=platform,
            index_client=client,
            timeout=self.timeout,
            also_installed=also,
            cache_dir=self.cache_dir,
            glibc=glibc,
        )


@dataclass(slots=True)
class _Work:
    """The state a RUN step's commands change, one command after another."""

    snapshot: Snapshot
    venvs: dict[str, str | None]
    files: ContextFiles
    cwd: str
    resolver: str = ""
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)


def _with_env(snapshot: Snapshot, env: Environment) -> Snapshot:
    """``snapshot`` with ``env`` in place of the environment at its path (dropped if empty)."""
    envs = [e for e in snapshot.environments if e.path != env.path]
    if env.distributions:
        envs.append(env)
    return with_environments(snapshot, envs)


def _path(cwd: str, word: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, word))


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def environment_roots(snapshot: Snapshot, venvs: Mapping[str, str | None]) -> list[str]:
    """Every directory whose contents are a Python environment's (and venv prefixes)."""
    roots = [p for e in snapshot.environments for p in (e.path, e.real_path) if p]
    roots += [interp.prefix for interp in interpreters(snapshot, venvs) if interp.venv]
    return sorted(set(roots))


def predict_run(instruction: Instruction, view: StageView, resolver: Resolver) -> RunResult:
    """The predicted effect of one ``RUN`` instruction on ``view``'s state."""
    work = _Work(view.snapshot, dict(view.venvs), view.files, view.workdir)
    files = view.files
    for mount_path, source in reversed(view.mounts.entries):
        files = files.add(mount_path, source)
    try:
        for command in run_commands(instruction):
            _command(list(command.argv), dict(command.environ), work, view, files, resolver)
    except Unpredictable as exc:
        return RunResult(
            view.snapshot,
            view.venvs,
            work.files,
            resolver=work.resolver,
            reason=str(exc),
            fails=exc.fails,
            notes=tuple(work.notes),
        )
    return RunResult(
        work.snapshot,
        work.venvs,
        work.files,
        work.resolver,
        notes=tuple(dict.fromkeys(work.notes)),
        checks=tuple(work.checks),
    )


def _command(
    argv: list[str],
    environ: dict[str, str],
    work: _Work,
    view: StageView,
    files: ContextFiles,
    resolver: Resolver,
) -> None:
    words = list(argv)
    inline: dict[str, str] = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        inline[name] = value
    words = strip_wrappers(words, inline)
    environ = {**environ, **inline}
    if not words:
        return
    head = basename(words[0])
    if head == "cd":
        work.cwd = _path(work.cwd, words[1]) if len(words) > 1 else "/root"
        return
    install = read_install(argv, environ)
    if install is not None:
        _install(install, words, environ, work, view, files, resolver)
        return
    invocation = pip_invocation(words)
    if invocation is not None:
        tool, sub, args = invocation
        if sub == "uninstall":
            _uninstall(tool, words, args, environ, work, view, files)
        elif sub == "sync" or sub not in _HARMLESS_PIP:
            raise Unpredictable(f"{' '.join(words[:3])} is not modelled")
        return
    if is_guard_call(words):
        return
    venv = _PYTHON.match(head) or head == "virtualenv" or (head == "uv" and "venv" in words[1:3])
    if venv and _venv(head, words, environ, work, view):
        return
    if _PYTHON.match(head) or _PIP.match(head):
        if all(w.startswith("-") and w in ("-V", "--version", "-VV") for w in words[1:]):
            return
        raise Unpredictable(f"{' '.join(words[:3])} runs Python code pinguard cannot model")
    if head == "uv":
        if words[1:] in (["--version"], ["-V"], ["version"]):
            return
        raise Unpredictable(f"{' '.join(words[:3])} is not modelled (only uv pip install, "
                            "uv pip uninstall and uv venv are)")  # fmt: skip
    if head in _PACKAGE_MANAGERS:
        _package_manager(head, words, work)
        return
    if head in HARMLESS:
        _file_command(head, words, work)
        return
    raise Unpredictable(f"runs {words[0]!r}, which pinguard does not model")


def _package_manager(head: str, words: list[str], work: _Work) -> None:
    """apt-get and friends: an install or removal that names a Python package, or an
    upgrade where the system package manager owns a Python environment, is unpredictable."""
    action = next((w for w in words[1:] if not w.startswith("-")), "")
    after = words[words.index(action) + 1 :] if action else []
    packages = [w for w in after if not w.startswith("-")]
    if action in _PACKAGE_MANAGERS[head]:
        python = [p for p in packages if "python" in p or p.startswith(("py3-", "pip"))]
        if python:
            raise Unpredictable(
                f"{head} {action} {' '.join(python)}: system packages of Python are not "
                "resolved by pinguard"
            )
        work.notes.append(
            f"{head} {action} is not resolved: a Python package pulled in as a dependency "
            "would not be seen"
        )
    elif action in _UPGRADES and any(
        e.path.startswith("/usr/lib/python3") for e in work.snapshot.environments
    ):
        raise Unpredictable(f"{head} {action} may change the system's Python packages")


def _file_command(head: str, words: list[str], work: _Work) -> None:
    args = [w for w in words[1:] if not w.startswith("-")]
    roots = environment_roots(work.snapshot, work.venvs)
    for arg in args:
        path = _path(work.cwd, arg)
        if work.files.known(path):
            work.files = work.files.forget(path)
        if head in _FILE_COMMANDS:
            for root in roots:
                if _inside(path, root) or (head in ("rm", "mv") and _inside(root, path)):
                    raise Unpredictable(f"{head} {arg} changes files of the environment {root}")


def _is_python(word: str) -> bool:
    return _PYTHON.match(basename(word)) is not None


def _target(
    tool: str,
    words: list[str],
    args: Sequence[str],
    environ: Mapping[str, str],
    work: _Work,
    view: StageView,
) -> Interpreter:
    """The interpreter an install or uninstall acts on."""
    for option in _ELSEWHERE:
        if tool == "uv" and option in ("--python", "-p"):
            continue
        if any(a == option or a.startswith(option + "=") for a in args):
            raise Unpredictable(f"{tool} {option} installs outside the environments modelled")
    if tool == "pip" and any(w == "--python" or w.startswith("--python=") for w in words):
        raise Unpredictable("pip --python runs the install for another interpreter (not modelled)")
    if tool == "pip":
        interp, why = find_interpreter(words[0], work.snapshot, work.venvs, environ, work.cwd)
    else:
        interp, why = _uv_target(args, environ, work)
    if interp is None:
        raise Unpredictable(why)
    root = view.user in ("", "root", "0", "0:0") or view.user.startswith(("root:", "0:"))
    if not root and not interp.venv:
        raise Unpredictable(
            f"{tool} runs as USER {view.user}: whether it may write {interp.site} or falls back "
            "to the user's site-packages depends on file permissions pinguard does not see"
        )
    return interp


def _uv_target(
    args: Sequence[str], environ: Mapping[str, str], work: _Work
) -> tuple[Interpreter | None, str]:
    """uv's choice: ``--python``, ``--system`` (or ``UV_SYSTEM_PYTHON``), else the virtual
    environment of ``VIRTUAL_ENV``, else a ``.venv`` in the working directory or above."""
    python = _option_value(args, ("--python", "-p")) or environ.get("UV_PYTHON")
    system = "--system" in args or environ.get("UV_SYSTEM_PYTHON", "").lower() in ("1", "true")
    found = interpreters(work.snapshot, work.venvs)
    if python:
        if "/" not in python:
            return None, f"uv --python {python} picks an interpreter by version (not modelled)"
        path = _path(work.cwd, python)
        for interp in found:
            if path in (interp.prefix, *[f"{d}/{basename(python)}" for d in interp.bin_dirs]):
                return interp, ""
        return None, f"uv --python {python}: no Python environment pinguard knows there"
    if system:
        return find_interpreter("python3", work.snapshot, work.venvs, environ, work.cwd)
    venv = environ.get("VIRTUAL_ENV")
    if venv:
        for interp in found:
            if interp.prefix == _path(work.cwd, venv):
                return interp, ""
        return None, f"VIRTUAL_ENV={venv} is no virtual environment pinguard knows"
    directory = work.cwd
    while True:
        for interp in found:
            if interp.prefix == posixpath.join(directory, ".venv"):
                return interp, ""
        if directory == "/":
            break
        directory = posixpath.dirname(directory)
    return None, "uv pip finds no virtual environment (no --system, VIRTUAL_ENV or .venv)"


def _option_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _unknown_values(what: str, values: Sequence[str]) -> None:
    for value in values:
        if "$" in value:
            raise Unpredictable(
                f"{what} {value} uses a variable with no known value (an ARG without a "
                "default: pass --build-arg)"
            )


def _install(
    cmd: InstallCommand,
    words: list[str],
    environ: Mapping[str, str],
    work: _Work,
    view: StageView,
    files: ContextFiles,
    resolver: Resolver,
) -> None:
    if "--dry-run" in cmd.args:
        return
    interp = _target(cmd.tool, words, cmd.args, environ, work, view)
    if cmd.editables:
        raise Unpredictable(f"installs the editable {cmd.editables[0]} (a local source)")
    _unknown_values("the requirement", cmd.positional)
    for word in cmd.positional:
        if parse_requirement(word) is None:
            raise Unpredictable(f"installs {word}, a local path or not a requirement")
    found = RequirementSet()
    for path in cmd.requirement_files:
        _unknown_values("-r", [path])
        read_requirements(_path(work.cwd, path), files, environ, found)
    for path in cmd.constraints:
        _unknown_values("-c", [path])
        read_requirements(_path(work.cwd, path), files, environ, found, constraint=True)
    if found.problems:
        raise Unpredictable(found.problems[0])
    index_url = found.index_url or cmd.index_url
    extra = (*cmd.extra_index_urls, *found.extra_index_urls)
    links = (*cmd.find_links, *found.find_links)
    _unknown_values("the index", [u for u in (index_url, *extra, *links) if u])
    for link in links:
        if "://" not in link or link.startswith("file:"):
            raise Unpredictable(f"--find-links {link} is a directory in the image")
    requirements = (*cmd.positional, *found.requirements)
    if not requirements:
        return
    if cmd.upgrade_packages and cmd.tool == "uv":
        _unknown_values("--upgrade-package", cmd.upgrade_packages)
    not_replayed = [a for a in cmd.args if a in ("--prefer-binary", "--no-binary", "--only-binary")]
    if not_replayed:
        work.notes.append(
            f"{', '.join(dict.fromkeys(not_replayed))} not replayed: uv chooses files by its own "
            "rules (a newer wheel before an older one)"
        )
    constraint_files: tuple[str, ...] = ()
    if found.constraints:
        text = "".join(f"{c}\n" for c in found.constraints)
        constraint_files = (resolver.scratch_file("constraints.txt", text),)
    replay = InstallReplay(
        command=cmd,
        requirements=tuple(requirements),
        index=IndexOptions(
            index_url=index_url,
            extra_index_urls=tuple(extra),
            find_links=tuple(links),
            no_index=cmd.no_index or found.no_index,
            index_strategy=cmd.index_strategy,
            prerelease=cmd.pre or found.pre,
        ),
        constraint_files=constraint_files,
    )
    work.resolver = resolver.describe(cmd.tool)
    env = interp.environment(work.snapshot)
    visible = interp.visible(work.snapshot)
    glibc = glibc_of(work.snapshot.debs)
    try:
        plan = resolver.plan(env, replay, view.platform, visible, glibc)
    except IndexUnreachable:
        raise
    except (ResolveError, UsageError) as exc:
        text = " ".join(str(exc).split())
        fails = any(w in text for w in ("No solution found", "unsatisfiable", "no version"))
        if fails:
            raise Unpredictable(
                f"the resolver finds no solution, so {cmd.tool} would fail and the build stop "
                f"here: {text[:600]}",
                fails=True,
            ) from exc
        raise Unpredictable(f"the resolver could not answer: {text[:600]}") from exc
    image_pip = next(
        (d.raw_version for e in (env, *visible) for d in e.distributions if d.name == "pip"),
        None,
    )
    if cmd.tool == "pip" and not replay.index.prerelease:
        refused = _prerelease_refusal(plan, replay, found.constraints, image_pip)
        if refused:
            raise Unpredictable(refused)
    if cmd.tool == "pip" and resolver.pip_check:
        work.checks.append(
            resolver.submit_check(
                env, replay, view.platform, glibc, visible, plan.install, image_pip
            )
        )
    work.notes.extend(plan.notes)
    work.snapshot = _with_env(work.snapshot, plan.after)


#: The first pip that takes a pre-release no specifier names when nothing final fits (it
#: vendors packaging 26); pip 25.3 and older refuse it, as uv does not (checked: pip 23.0.1,
#: 23.2.1, 24.2, 25.0 to 25.3 refuse ``ccc>=1.5`` with only ``2.0b1`` above 1.5; 26.0 takes it).
PIP_TAKES_UNNAMED_PRERELEASES = Version("26.0")


def _prerelease_refusal(
    plan: Plan, replay: InstallReplay, constraints: Sequence[str], image_pip: str | None
) -> str | None:
    """Why a pip older than 26.0 would refuse what uv answered: a pre-release that no
    ``--pre`` allows and no specifier on that package names (uv takes it when nothing final
    fits; those pips fail the step). None when there is none, or the pip is not known."""
    try:
        pip = Version(image_pip) if image_pip else None
    except InvalidVersion:
        pip = None
    if pip is None or pip >= PIP_TAKES_UNNAMED_PRERELEASES:
        return None
    specifiers: dict[str, list[SpecifierSet]] = {}
    texts = [*replay.requirements, *constraints]
    texts += [r for d in plan.after.distributions for r in d.requires_dist]
    for text in texts:
        req = parse_requirement(text)
        if req is not None:
            specifiers.setdefault(canonicalize_name(req.name), []).append(req.specifier)
    for name, raw in plan.install:
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        specs = specifiers.get(name, [])
        named = any(spec.prereleases for spec in specs)
        if version.is_prerelease and not named and any(str(s) for s in specs):
            return (
                f"uv installs {name} {raw}, a pre-release that no --pre allows and no "
                f"specifier on {name} names; pip {image_pip} (the image's: pip before "
                f"{PIP_TAKES_UNNAMED_PRERELEASES} takes no such pre-release) would find no "
                "version to install and fail this step"
            )
    return None


def _pip_verdict(
    env: Environment,
    replay: InstallReplay,
    platform: Platform | None,
    glibc: tuple[int, int] | None,
    also: Sequence[Environment],
    uv_install: Sequence[tuple[NormalizedName, str]],
    image_pip: str | None,
    timeout: float,
) -> tuple[str, str]:
    """pip's answer beside uv's: ``("differ", reason)`` when they disagree."""
    answer = check_with_pip(
        env, replay, platform=platform, glibc=glibc, also_installed=also, timeout=timeout
    )
    if answer.unavailable:
        return "note", f"pip's own resolver could not be asked: {answer.unavailable}"
    runs = f"the image runs pip {image_pip}" if image_pip else "the image's pip is not known"
    which = f"pip {answer.version} (this machine's; {runs})"
    uv_says = ", ".join(f"{n}=={v}" for n, v in uv_install) or "nothing"
    if answer.refused:
        return "differ", f"uv installs {uv_says}, but {which} finds no solution: {answer.refused}"
    if not same_install(answer.install, uv_install):
        pip_says = ", ".join(f"{n}=={v}" for n, v in answer.install) or "nothing"
        return "differ", (
            f"uv and pip resolve this step differently: uv installs {uv_says}; {which} "
            f"installs {pip_says}"
        )
    return "agree", f"{which} agrees"


def _uninstall(
    tool: str,
    words: list[str],
    args: Sequence[str],
    environ: Mapping[str, str],
    work: _Work,
    view: StageView,
    files: ContextFiles,
) -> None:
    interp = _target(tool, words, args, environ, work, view)
    names: list[str] = []
    yes = tool == "uv" or environ.get("PIP_YES", "").lower() in ("1", "true", "yes", "on")
    skip_value = False
    found = RequirementSet()
    for i, arg in enumerate(args):
        if skip_value:
            skip_value = False
            continue
        if arg in ("-y", "--yes"):
            yes = True
        elif arg in ("-r", "--requirement"):
            skip_value = True
            if i + 1 < len(args):
                read_requirements(_path(work.cwd, args[i + 1]), files, environ, found)
        elif not arg.startswith("-"):
            names.append(arg)
    if found.problems:
        raise Unpredictable(found.problems[0])
    if not yes:
        raise Unpredictable(
            "pip uninstall without -y asks for a confirmation the build cannot give"
        )
    _unknown_values("the package", names)
    env = interp.environment(work.snapshot)
    visible = interp.visible(work.snapshot)
    gone: set[str] = set()
    for raw in (*names, *found.requirements):
        req = parse_requirement(raw)
        name = canonicalize_name(req.name if req is not None else raw)
        if any(d.name == name for d in env.distributions):
            gone.add(name)
        elif any(d.name == name for e in visible for d in e.distributions):
            where = next(e.path for e in visible if any(d.name == name for d in e.distributions))
            raise Unpredictable(
                f"{name} is installed in {where}, outside the environment {tool} uninstalls from"
            )
    if gone:
        kept = tuple(d for d in env.distributions if d.name not in gone)
        work.snapshot = _with_env(work.snapshot, replace(env, distributions=kept))


def _venv(
    head: str, words: list[str], environ: Mapping[str, str], work: _Work, view: StageView
) -> bool:
    """``python -m venv DIR``, ``virtualenv DIR``, ``uv venv [DIR]``: a new environment.
    False when ``words`` is not a venv command at all."""
    if _PYTHON.match(head):
        if words[1:3] != ["-m", "venv"]:
            return False
        args, maker = words[3:], "venv"
        interp, why = find_interpreter(words[0], work.snapshot, work.venvs, environ, work.cwd)
    elif head == "virtualenv":
        args, maker = words[1:], "virtualenv"
        interp, why = find_interpreter("python3", work.snapshot, work.venvs, environ, work.cwd)
    else:
        args, maker = words[words.index("venv") + 1 :], "uv venv"
        if _option_value(args, ("--python", "-p")):
            raise Unpredictable("uv venv --python picks an interpreter pinguard does not model")
        interp, why = find_interpreter("python3", work.snapshot, work.venvs, environ, work.cwd)
    if interp is None:
        raise Unpredictable(f"{maker}: {why}")
    dirs = [a for a in args if not a.startswith("-") and a not in _values_of(args)]
    if not dirs:
        dirs = [".venv"] if maker == "uv venv" else []
    if not dirs:
        raise Unpredictable(f"{maker} names no directory")
    seeds: tuple[tuple[str, str], ...] = ()
    if maker == "venv" and "--without-pip" not in args:
        if "--upgrade-deps" in args:
            raise Unpredictable("python -m venv --upgrade-deps upgrades pip from the index")
        bundled = venv_seeds(interp, work.snapshot)
        if bundled is None:
            raise Unpredictable(
                "python -m venv installs the pip that ensurepip bundles with this Python, "
                "whose version the audit of the base does not show"
            )
        seeds = bundled
    elif maker == "virtualenv" and not any(a in ("--no-seed", "--without-pip") for a in args):
        raise Unpredictable("virtualenv seeds pip, setuptools and wheel from wheels it embeds")
    elif maker == "uv venv" and "--seed" in args:
        raise Unpredictable("uv venv --seed installs pip from the index")
    short = ".".join((interp.python or "3").split(".")[:2])
    for d in dirs:
        prefix = _path(work.cwd, d)
        work.venvs[prefix] = interp.python
        site = f"{prefix}/lib/python{short}/site-packages"
        existing = work.snapshot.environment(site)
        keep = () if existing is None or "--clear" in args else existing.distributions
        have = {x.name for x in keep}
        new = seeded(site, tuple(s for s in seeds if canonicalize_name(s[0]) not in have))
        env = Environment(site, interp.python, tuple(sorted((*keep, *new), key=lambda x: x.name)))
        work.snapshot = _with_env(work.snapshot, env)
    return True


def _values_of(args: Sequence[str]) -> set[str]:
    """The words that are the values of options taking one (``--prompt NAME``)."""
    takes = {"--prompt", "--python", "-p", "--seeder", "--activators"}
    return {args[i + 1] for i, a in enumerate(args[:-1]) if a in takes}
