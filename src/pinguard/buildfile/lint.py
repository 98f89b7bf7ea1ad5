"""Lint a parsed Dockerfile for pip and uv install steps that let dependencies drift.

`find_installs` walks every RUN instruction of a `Dockerfile` (shell form, exec form with
``sh -c``, and heredoc scripts run by the shell), splits the shell text into simple commands
(`pinguard.buildfile.shell`), expands ``$VAR`` with the ARG/ENV values in effect plus inline
assignments, ``env NAME=...`` and ``export``, and reads each ``pip install``, ``python -m pip
install`` or ``uv pip install`` as a `pinguard.buildfile.pipcli.InstallCommand`. `lint` applies the
rules in `RULES` to those commands and returns `LintFinding` values (a policy `Finding` plus
the Dockerfile location: the physical line of the command and the first and last line of its
instruction), sorted so two runs give identical output. Policy facts come in as plain
parameters (the exactly pinned requirements, whether the guard is required) so this module
does not depend on the policy engine. The reports (table, json, SARIF) are rendered by
`pinguard.report.lint`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from pinguard.buildfile.dockerfile import Dockerfile, Instruction, expand_word
from pinguard.buildfile.pipcli import (
    ASSIGNMENT,
    InstallCommand,
    basename,
    is_guard_call,
    pip_invocation,
    read_install,
    strip_wrappers,
)
from pinguard.buildfile.shell import SHELLS, simple_commands, tokenize
from pinguard.models import Finding, Severity
from pinguard.target import parse_requirement

__all__ = [
    "DEFAULT_NIGHTLY_PATTERNS",
    "RULES",
    "LintFinding",
    "ShellCommand",
    "find_installs",
    "lint",
    "run_commands",
]

RULES: Mapping[str, tuple[Severity, str]] = {
    "unconstrained-install": (
        Severity.WARNING,
        "pip/uv install without a constraints file (-c, PIP_CONSTRAINT, UV_CONSTRAINT)",
    ),
    "prerelease-unpinned": (
        Severity.ERROR,
        "--pre or a nightly index while a requirement is not pinned exactly with ==",
    ),
    "index-shadowing": (
        Severity.ERROR,
        "an extra index that can shadow the packages of the main index",
    ),
    "no-deps-repin": (
        Severity.WARNING,
        "--no-deps re-pins a package without checking what depends on it",
    ),
    "upgrade-pinned": (
        Severity.ERROR,
        "-U/--upgrade of a package the policy pins",
    ),
    "missing-guard": (
        Severity.ERROR,
        "an install step not followed by `pinguard guard` (the policy requires it)",
    ),
}

# Matched case-insensitively against index and find-links URLs.
DEFAULT_NIGHTLY_PATTERNS: tuple[str, ...] = (
    r"nightly",
    r"(^|[/._-])pre(release)?s?([/._-]|$)",
    r"(^|[/._-])dev([/._-]|$)",
    r"(^|[/._-])(preview|snapshot|canary)s?([/._-]|$)",
    r"test\.pypi\.org",
)

# Installing only these needs no constraints: they have no dependencies of their own.
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel", "uv"})


@dataclass(frozen=True, slots=True)
class LintFinding:
    """A lint `Finding` and where it is: the command's lines and its instruction's lines."""

    finding: Finding
    path: str
    line: int
    end_line: int
    instruction_line: int
    instruction_end_line: int
    stage: str  # the stage name, or its index when it has none
    command: str

    @property
    def rule(self) -> str:
        return self.finding.rule

    @property
    def severity(self) -> Severity:
        return self.finding.severity

    def sort_key(self) -> tuple[str, int, str, str, str]:
        return (self.path, self.line, self.rule, self.finding.package or "", self.finding.message)


# --- shell text -> simple commands ---------------------------------------------------------


def _expand(raw: str, env: Mapping[str, str]) -> list[str]:
    raw = raw.replace("\\\n", "")
    try:
        value = expand_word(raw, env, keep_unknown=True)
    except ValueError:
        return [raw]
    if "$" in raw and not any(q in raw for q in "'\""):
        return value.split()  # an unquoted expansion is split into fields, or vanishes
    return [value]


@dataclass(slots=True)
class _Script:
    text: str
    line_of: Callable[[int], int]


@dataclass(frozen=True, slots=True)
class _Command:
    argv: tuple[str, ...]
    environ: tuple[tuple[str, str], ...]
    text: str
    line: int
    end_line: int


def _script_commands(
    script: _Script,
    env: dict[str, str],
    heredoc_scripts: Mapping[str, _Script] | None = None,
) -> Iterator[_Command]:
    """The simple commands of a shell script, in order, expanding with ``env`` (updated)."""
    for simple in simple_commands(tokenize(script.text)):
        words, redirects = simple.words, simple.redirects
        inline: dict[str, str] = {}
        argv: list[str] = []
        assigning = True
        for tok in words:
            if assigning and ASSIGNMENT.match(tok.text):
                name, _, raw = tok.text.partition("=")
                inline[name] = " ".join(_expand(raw, {**env, **inline}))
                continue
            assigning = False
            argv.extend(_expand(tok.text, {**env, **inline}))
        argv = strip_wrappers(argv, inline)
        if not argv:
            env.update(inline)  # NAME=value alone sets a shell variable
            continue
        if argv[0] in ("export", "declare", "typeset"):
            for word in argv[1:]:
                if ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    env[name] = value
            continue
        if heredoc_scripts and basename(argv[0]) in SHELLS and "-c" not in argv:
            bodies = [
                heredoc_scripts[target]
                for op, target in redirects
                if op in ("<<", "<<-") and target in heredoc_scripts
            ]
            if bodies:
                for body in bodies:
                    yield from _script_commands(body, {**env, **inline})
                continue
        if words:
            start, end = words[0].start, words[-1].end
            yield _Command(
                argv=tuple(argv),
                environ=tuple(sorted({**env, **inline}.items())),
                text=script.text[start:end],
                line=script.line_of(start),
                end_line=script.line_of(max(end - 1, start)),
            )


def _heredoc_script(body: str, start_line: int) -> _Script:
    return _Script(body, lambda offset: start_line + body.count("\n", 0, offset))


def _run_commands(instruction: Instruction) -> Iterator[_Command]:
    env = instruction.environ
    if instruction.exec_form is not None:
        argv = list(instruction.exec_form)
        if argv and basename(argv[0]) in SHELLS and "-c" in argv[:-1]:
            script = argv[argv.index("-c") + 1]
            line = instruction.start_line
            yield from _script_commands(_Script(script, lambda _o: line), env)
        elif argv:
            yield _Command(
                argv=tuple(argv),
                environ=instruction.variables,
                text=instruction.args,
                line=instruction.start_line,
                end_line=instruction.end_line,
            )
        return
    scripts = {
        h.delimiter: _heredoc_script(h.body, h.start_line)
        for h in instruction.heredocs
        if not h.body.startswith("#!")
        or basename(h.body.split()[0]) in SHELLS
        or basename(h.body.split("\n", 1)[0].split()[-1]) in SHELLS
    }
    line_script = _Script(instruction.args, instruction.line_at)
    tokens = tokenize(instruction.args)
    only_heredocs = all((t.op and t.text in ("<<", "<<-")) or not t.op for t in tokens) and all(
        not c.words for c in simple_commands(tokens)
    )
    if instruction.heredocs and only_heredocs:
        for h in instruction.heredocs:  # RUN <<EOF: each heredoc is a script for the shell
            if h.delimiter in scripts:
                yield from _script_commands(scripts[h.delimiter], dict(env))
        return
    yield from _script_commands(line_script, env, scripts)


#: One simple command of a RUN instruction: its words expanded with the ARG/ENV values in
#: effect (unknown ``$VARS`` kept as written), the variables in effect for it, its lines.
ShellCommand = _Command


def run_commands(instruction: Instruction) -> Iterator[ShellCommand]:
    """The simple commands a RUN instruction runs, in order, read as the lint reads them
    (shell and exec forms, heredoc scripts, ``export`` and inline assignments); `pinguard
    predict` walks the same commands."""
    return _run_commands(instruction)


def find_installs(dockerfile: Dockerfile) -> tuple[InstallCommand, ...]:
    """Every pip / uv pip install command in the RUN instructions, in file order."""
    return tuple(install for _, install, _ in _walk(dockerfile) if install is not None)


def _walk(dockerfile: Dockerfile) -> Iterator[tuple[_Command, InstallCommand | None, int]]:
    """(command, its install reading or None, instruction index) for every RUN command."""
    for index, instruction in enumerate(dockerfile.instructions):
        if instruction.keyword != "RUN":
            continue
        for command in _run_commands(instruction):
            yield command, read_install(command.argv, dict(command.environ)), index


# --- rules ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    text: str
    name: NormalizedName | None
    exact: bool
    version: str | None = None
    specifier: str = ""


def _target(text: str) -> _Target:
    req = parse_requirement(text)
    if req is None:
        base = basename(text)
        try:
            if base.endswith(".whl"):
                name, version, _, _ = parse_wheel_filename(base)
                return _Target(text, name, True, str(version))
            if base.endswith((".tar.gz", ".zip")):
                name, version = parse_sdist_filename(base)
                return _Target(text, name, True, str(version))
        except (InvalidWheelFilename, InvalidSdistFilename):
            pass
        return _Target(text, None, False)  # a directory, a glob, a VCS URL
    name = canonicalize_name(req.name)
    if req.url:
        return _Target(text, name, True, None, f" @ {req.url}")
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return _Target(text, name, True, specs[0].version, str(req.specifier))
    return _Target(text, name, False, None, str(req.specifier))


def _pins(pinned: Iterable[str | Requirement] | None) -> dict[NormalizedName, SpecifierSet]:
    pins: dict[NormalizedName, SpecifierSet] = {}
    for item in pinned or ():
        req = item if isinstance(item, Requirement) else Requirement(item)
        name = canonicalize_name(req.name)
        pins[name] = pins.get(name, SpecifierSet()) & req.specifier
    return pins


def _nightly(url: str, patterns: Sequence[re.Pattern[str]]) -> bool:
    return any(p.search(url) for p in patterns)


def _finding(
    rule: str, message: str, severity: Severity | None = None, **kw: str | None
) -> Finding:
    return Finding(rule=rule, severity=severity or RULES[rule][0], message=message, **kw)  # type: ignore[arg-type]


def _rule_unconstrained(cmd: InstallCommand, targets: list[_Target]) -> Iterator[Finding]:
    if not (cmd.requirements or cmd.requirement_files) or cmd.constraints or cmd.require_hashes:
        return
    if not cmd.requirement_files and all(t.name in BOOTSTRAP for t in targets):
        return
    if cmd.no_deps and not cmd.requirement_files and all(t.exact for t in targets):
        return  # nothing is resolved: only the named exact versions are installed
    env_name = "UV_CONSTRAINT" if cmd.tool == "uv" else "PIP_CONSTRAINT"
    what = ", ".join([t.text for t in targets] + [f"-r {f}" for f in cmd.requirement_files])
    yield _finding(
        "unconstrained-install",
        f"{_tool(cmd)} install of {what} runs without constraints, so the resolver may up- or "
        f"downgrade packages an earlier step installed; add -c /path/constraints.txt or set "
        f"{env_name} (ENV or ARG) to a constraints file",
    )


def _rule_prerelease(
    cmd: InstallCommand, targets: list[_Target], patterns: Sequence[re.Pattern[str]]
) -> Iterator[Finding]:
    reasons = ["--pre"] if cmd.pre else []
    urls = [cmd.index_url or "", *cmd.extra_index_urls, *cmd.find_links]
    reasons += [f"the nightly index {u}" for u in urls if u and _nightly(u, patterns)]
    if not reasons:
        return
    why = " and ".join(reasons)
    for t in targets:
        if not t.exact:
            yield _finding(
                "prerelease-unpinned",
                f"{why} without an exact pin: {t.text} may resolve to any pre-release or nightly "
                f"build; pin it with == to the build you tested",
                package=t.name or t.text,
            )
    for f in cmd.requirement_files:
        yield _finding(
            "prerelease-unpinned",
            f"{why} with requirements from {f}, which the lint cannot check for exact pins; "
            f"name the pre-release packages on the command line with ==",
            package=None,
        )


def _rule_shadowing(cmd: InstallCommand, patterns: Sequence[re.Pattern[str]]) -> Iterator[Finding]:
    main = cmd.index_url or "https://pypi.org/simple"
    strategy = cmd.index_strategy or "first-index"
    for url in cmd.extra_index_urls:
        nightly = _nightly(url, patterns)
        if cmd.tool == "pip":
            yield _finding(
                "index-shadowing",
                f"pip merges --extra-index-url {url} with {main} and installs the highest version "
                f"found on either, so {url} can shadow any package of {main}; install from one "
                f"--index-url per step, or use `uv pip install` (its default --index-strategy "
                f"first-index takes each package from the first index that has it)",
                severity=Severity.ERROR if nightly else Severity.WARNING,
            )
        elif strategy.startswith("unsafe"):
            yield _finding(
                "index-shadowing",
                f"--index-strategy {strategy} lets {url} and {main} compete for every package, "
                f"so {url} can shadow {main}; keep the default --index-strategy first-index",
            )
        elif nightly:
            yield _finding(
                "index-shadowing",
                f"uv searches {url} before {main} and takes every package that index carries "
                f"from it, so the nightly index shadows {main}; install the nightly packages in "
                f"their own step with --index-url {url} and exact pins",
            )


def _rule_no_deps(
    cmd: InstallCommand, targets: list[_Target], pins: Mapping[NormalizedName, SpecifierSet]
) -> Iterator[Finding]:
    if not cmd.no_deps:
        return
    for t in targets:
        if t.name is None:
            continue
        policy = f" (the policy pins {t.name}{pins[t.name]})" if t.name in pins else ""
        yield _finding(
            "no-deps-repin",
            f"--no-deps installs {t.text} without checking the packages that depend on "
            f"{t.name}{policy}: any of them that requires another version is left unmet and pip "
            f"still exits 0; run `pip check` or `pinguard guard` in the same RUN, or pin it with "
            f"a constraints file",
            package=t.name,
        )


def _rule_upgrade(
    cmd: InstallCommand, targets: list[_Target], pins: Mapping[NormalizedName, SpecifierSet]
) -> Iterator[Finding]:
    if not pins:
        return
    flagged: dict[NormalizedName, str] = {}
    if cmd.upgrade:
        for t in targets:
            if t.name is None or t.name not in pins:
                continue
            spec = pins[t.name]
            if not (t.exact and t.version and spec.contains(t.version, prereleases=True)):
                flagged[t.name] = f"--upgrade {t.text}"
    for raw in cmd.upgrade_packages:
        target = _target(raw)
        if target.name is not None and target.name in pins:
            flagged[target.name] = f"--upgrade-package {raw}"
    for name, how in sorted(flagged.items()):
        pin = str(pins[name]) or " (any version)"
        yield _finding(
            "upgrade-pinned",
            f"{how} may move {name}, which the policy pins to {name}{pin}; drop the upgrade "
            f"or pin {name}{pin} on the command line",
            package=name,
        )


def _tool(cmd: InstallCommand) -> str:
    return "uv pip" if cmd.tool == "uv" else "pip"


def _stage_label(dockerfile: Dockerfile, instruction: Instruction) -> str:
    if instruction.stage is None:
        return ""
    stage = dockerfile.stages[instruction.stage]
    return stage.name or str(stage.index)


def lint(
    dockerfile: Dockerfile,
    *,
    pinned: Iterable[str | Requirement] | None = None,
    require_guard: bool = False,
    nightly_patterns: Sequence[str] | None = None,
    ignore: Collection[str] = (),
    policy_file: str | None = None,
) -> tuple[LintFinding, ...]:
    """Lint ``dockerfile``; ``pinned`` are the policy's pins (``"torch==2.9.1"``, ...).

    ``require_guard`` turns on `missing-guard`; ``nightly_patterns`` replaces
    `DEFAULT_NIGHTLY_PATTERNS`; rules named in ``ignore`` are skipped. Findings are sorted.
    """
    unknown = sorted(set(ignore) - set(RULES))
    if unknown:
        raise ValueError(f"unknown lint rule(s) {', '.join(map(repr, unknown))}")
    pins = _pins(pinned)
    patterns = [
        re.compile(p, re.IGNORECASE) for p in (nightly_patterns or DEFAULT_NIGHTLY_PATTERNS)
    ]
    commands = list(_walk(dockerfile))
    runs = [i for i, ins in enumerate(dockerfile.instructions) if ins.keyword == "RUN"]
    next_run: dict[int, int] = {}
    for a, b in itertools.pairwise(runs):
        if dockerfile.instructions[a].stage == dockerfile.instructions[b].stage:
            next_run[a] = b
    guards = [
        (index, pos)
        for pos, (command, install, index) in enumerate(commands)
        if install is None and is_guard_call(command.argv)
    ]
    checks = [
        (index, pos)
        for pos, (command, install, index) in enumerate(commands)
        if install is None
        and (
            is_guard_call(command.argv)
            or ((p := pip_invocation(list(command.argv))) is not None and p[1] == "check")
        )
    ]
    out: list[LintFinding] = []
    for pos, (command, cmd, index) in enumerate(commands):
        if cmd is None:
            continue
        instruction = dockerfile.instructions[index]
        targets = [_target(r) for r in cmd.requirements]
        found: list[Finding] = []
        found += _rule_unconstrained(cmd, targets)
        found += _rule_prerelease(cmd, targets, patterns)
        found += _rule_shadowing(cmd, patterns)
        if not any(i == index and p > pos for i, p in checks):
            found += _rule_no_deps(cmd, targets, pins)
        found += _rule_upgrade(cmd, targets, pins)
        if require_guard and not any(
            (i == index and p > pos) or i == next_run.get(index) for i, p in guards
        ):
            found.append(
                _finding(
                    "missing-guard",
                    f"{_tool(cmd)} install is not followed by `pinguard guard` in the same RUN "
                    f"or the next one, so a drift it causes is not caught at this step; append "
                    f"`&& pinguard guard --policy ...` to this RUN",
                )
            )
        for f in found:
            if f.rule in ignore:
                continue
            if policy_file and f.rule in ("upgrade-pinned", "missing-guard"):
                f = replace(f, policy_file=policy_file)  # noqa: PLW2901
            out.append(
                LintFinding(
                    finding=f,
                    path=dockerfile.path,
                    line=command.line,
                    end_line=command.end_line,
                    instruction_line=instruction.start_line,
                    instruction_end_line=instruction.end_line,
                    stage=_stage_label(dockerfile, instruction),
                    command=command.text,
                )
            )
    return tuple(sorted(out, key=LintFinding.sort_key))
