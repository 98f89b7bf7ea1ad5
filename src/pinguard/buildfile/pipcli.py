"""Reading pip and uv command lines: which words are an install, and what its options say.

Owns the option tables of ``pip install`` and ``uv pip install`` (which options take a value,
short-flag clusters, ``--opt=value``), recognising ``pip``, ``pip3.11``, ``python -m pip`` and
``uv pip`` behind ``NAME=value`` prefixes and wrappers such as ``env``, ``sudo`` and ``exec``,
and folding ``PIP_*`` / ``UV_*`` settings from the environment into one `InstallCommand`: the
one parsed form of an install command line. The Dockerfile lint, the resolver's replay of
history steps and ``pinguard plan`` all read install commands through `read_install`. It also
recognises a ``pinguard guard`` call (`is_guard_call`), which the lint and the guard's step
names look for. Input is a list of words; splitting shell text is `pinguard.buildfile.shell`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TRUE_VALUES = frozenset({"1", "true", "yes", "on"})
RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"}
)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

_PIP = re.compile(r"pip(\d+(\.\d+)*)?")
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def _options(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Options that take a value, per tool; everything else is a flag (or carries ``=value``).
_PIP_VALUE = _options(
    """-r --requirement -c --constraint -e --editable -t --target --platform --python-version
    --implementation --abi --root --prefix --src --upgrade-strategy -C --config-settings
    --global-option --build-option --install-option --no-binary --only-binary --progress-bar
    --root-user-action --report -i --index-url --extra-index-url -f --find-links --cache-dir
    --log --log-file --proxy --retries --timeout --exists-action --trusted-host --cert
    --client-cert --python --group --build-constraint --keyring-provider --use-feature
    --use-deprecated --resume-retries"""
)
_UV_VALUE = _options(
    """-r --requirement --requirements -c --constraint --constraints --override --overrides -b
    --build-constraint --build-constraints -e --editable -i --index-url --extra-index-url --index
    --default-index -f --find-links --index-strategy --keyring-provider -P --upgrade-package
    --reinstall-package --no-binary --only-binary --no-build-package --no-binary-package -p
    --python -t --target --prefix --python-version --python-platform --prerelease --resolution
    --exclude-newer -C --config-setting --config-settings-package --link-mode --cache-dir
    --directory --project --config-file --color --torch-backend --group --extra
    --refresh-package --allow-insecure-host --trusted-host --exclude --fork-strategy
    --no-build-isolation-package --python-preference"""
)
_UV_GLOBAL_VALUE = _options(
    "--cache-dir --directory --project --config-file --color --python-preference"
)
_PIP_GLOBAL_VALUE = _options(
    """--log --log-file --proxy --retries --timeout --exists-action --trusted-host --cert
    --client-cert --cache-dir --python --keyring-provider --use-feature --use-deprecated
    --resume-retries"""
)
# option spelling -> canonical key
_CANONICAL = {
    "-r": "requirement",
    "--requirement": "requirement",
    "--requirements": "requirement",
    "-c": "constraint",
    "--constraint": "constraint",
    "--constraints": "constraint",
    "-e": "editable",
    "--editable": "editable",
    "-i": "index-url",
    "--index-url": "index-url",
    "--default-index": "index-url",
    "--extra-index-url": "extra-index",
    "--index": "extra-index",
    "-f": "find-links",
    "--find-links": "find-links",
    "-U": "upgrade",
    "--upgrade": "upgrade",
    "-P": "upgrade-package",
    "--upgrade-package": "upgrade-package",
    "--pre": "pre",
    "--prerelease": "prerelease",
    "--no-deps": "no-deps",
    "--require-hashes": "require-hashes",
    "--index-strategy": "index-strategy",
    "--no-index": "no-index",
    "--force-reinstall": "force-reinstall",
    "--upgrade-strategy": "upgrade-strategy",
    "-I": "force-reinstall",
    "--ignore-installed": "force-reinstall",
    "--reinstall": "force-reinstall",
}


@dataclass(frozen=True, slots=True)
class InstallCommand:
    """One ``pip install`` (tool "pip") or ``uv pip install`` (tool "uv"), parsed.

    Settings from the environment (``PIP_CONSTRAINT``, ``UV_INDEX_STRATEGY``, ...) are folded
    into the fields, so a reader need not know where a setting came from.
    """

    tool: str  # "pip" or "uv"
    args: tuple[str, ...]  # the words after ``install``
    positional: tuple[str, ...] = ()  # requirement specifiers (and anything else positional)
    editables: tuple[str, ...] = ()
    requirement_files: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    pre: bool = False
    upgrade: bool = False
    upgrade_packages: tuple[str, ...] = ()
    no_deps: bool = False
    force_reinstall: bool = False
    require_hashes: bool = False
    index_strategy: str | None = None
    upgrade_strategy: str | None = None  # pip's --upgrade-strategy (only-if-needed when None)

    @property
    def requirements(self) -> tuple[str, ...]:
        """What it installs as written: positional requirements, then ``-e`` targets."""
        return self.positional + self.editables


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def strip_wrappers(argv: list[str], inline: dict[str, str]) -> list[str]:
    """Drop reserved words and wrappers (env, sudo, exec, ...) collecting ``env`` assignments."""
    while argv:
        head = basename(argv[0])
        if argv[0] in RESERVED or head in {"exec", "command", "nohup", "time"}:
            argv = argv[1:]
        elif head == "env":
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or ASSIGNMENT.match(argv[0])):
                if ASSIGNMENT.match(argv[0]):
                    name, _, value = argv[0].partition("=")
                    inline[name] = value
                elif argv[0] in ("-u", "--unset") and len(argv) > 1:
                    inline.pop(argv[1], None)
                    argv = argv[1:]
                argv = argv[1:]
        elif head in {"sudo", "nice", "timeout"}:
            argv = argv[1:]
            while argv and argv[0].startswith("-"):
                takes = argv[0] in {"-u", "-g", "-n", "-s", "-k", "--signal", "--kill-after"}
                argv = argv[2:] if takes else argv[1:]
            if head == "timeout" and argv:
                argv = argv[1:]  # the duration
        else:
            return argv
    return argv


def _skip_options(args: list[str], value_options: frozenset[str]) -> int:
    """Index of the first argument that is not an option (or an option's value)."""
    k = 0
    while k < len(args) and args[k].startswith("-"):
        k += 2 if args[k] in value_options else 1
    return k


def pip_invocation(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """(tool, subcommand, arguments) for pip / python -m pip / uv pip commands."""
    if not argv:
        return None
    head = basename(argv[0])
    rest = argv[1:]
    tool = ""
    if _PIP.fullmatch(head):
        tool = "pip"
    elif _PYTHON.fullmatch(head):
        k = 0
        module = ""
        while k < len(rest) and rest[k].startswith("-"):
            if rest[k] == "-m" and k + 1 < len(rest):
                module = rest[k + 1]
                k += 2
                break
            if rest[k].startswith("-m") and len(rest[k]) > 2:
                module = rest[k][2:]
                k += 1
                break
            k += 2 if rest[k] in ("-X", "-W") else 1
        if module not in ("pip", "uv"):
            return None
        tool, rest = module, rest[k:]
    elif head == "uv":
        tool = "uv"
    else:
        return None
    if tool == "uv":
        k = _skip_options(rest, _UV_GLOBAL_VALUE)
        if k >= len(rest) or rest[k] != "pip":
            return None
        rest = rest[:k] + rest[k + 1 :]
        k = _skip_options(rest, _UV_GLOBAL_VALUE)
    else:
        k = _skip_options(rest, _PIP_GLOBAL_VALUE)
    if k >= len(rest):
        return None
    return tool, rest[k], rest[:k] + rest[k + 1 :]


def parse_install(
    tool: str, args: Sequence[str], environ: Mapping[str, str] | None = None
) -> InstallCommand:
    """Parse the words after ``install``; settings from ``environ`` (``PIP_*``/``UV_*``) fold in."""
    environ = environ or {}
    args = list(args)
    value_options = _UV_VALUE if tool == "uv" else _PIP_VALUE
    options: list[tuple[str, str]] = []
    positional: list[str] = []
    k = 0
    while k < len(args):
        arg = args[k]
        k += 1
        if arg == "--":
            positional.extend(args[k:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and name in value_options and k < len(args):
                value = args[k]
                k += 1
            options.append((name, value))
        elif arg.startswith("-") and len(arg) > 1:
            for j in range(1, len(arg)):
                short = "-" + arg[j]
                if short in value_options:
                    value = arg[j + 1 :]
                    if not value and k < len(args):
                        value = args[k]
                        k += 1
                    options.append((short, value))
                    break
                options.append((short, ""))
        else:
            positional.append(arg)

    def values(key: str) -> list[str]:
        return [v for o, v in options if _CANONICAL.get(o) == key]

    def flag(key: str) -> bool:
        return any(_CANONICAL.get(o) == key for o, _ in options)

    def env_list(name: str) -> list[str]:
        return environ.get(name, "").split()

    def env_true(name: str) -> bool:
        return environ.get(name, "").strip().lower() in TRUE_VALUES

    prefix = "UV_" if tool == "uv" else "PIP_"
    index_urls = values("index-url") or env_list(prefix + "INDEX_URL")
    if tool == "uv":
        index_urls = index_urls or env_list("UV_DEFAULT_INDEX")
    extra = values("extra-index") or env_list(prefix + "EXTRA_INDEX_URL")
    if tool == "uv":
        extra += env_list("UV_INDEX")
    uv_env = environ if tool == "uv" else {}  # UV_* settings are not pip's
    prerelease = (values("prerelease") or [uv_env.get("UV_PRERELEASE", "")])[-1]
    strategy = (values("upgrade-strategy") or [environ.get("PIP_UPGRADE_STRATEGY", "")])[-1]
    return InstallCommand(
        tool=tool,
        args=tuple(args),
        positional=tuple(positional),
        editables=tuple(values("editable")),
        requirement_files=tuple(values("requirement")),
        constraints=tuple(values("constraint") + env_list(prefix + "CONSTRAINT")),
        index_url=index_urls[-1] if index_urls else None,
        extra_index_urls=tuple(extra),
        find_links=tuple(values("find-links") + env_list(prefix + "FIND_LINKS")),
        no_index=flag("no-index") or env_true(prefix + "NO_INDEX"),
        pre=flag("pre")
        or (tool == "pip" and env_true("PIP_PRE"))
        or prerelease in {"allow", "if-necessary", "if-necessary-or-explicit"},
        upgrade=flag("upgrade") or env_true(prefix + "UPGRADE"),
        upgrade_packages=tuple(values("upgrade-package")),
        no_deps=flag("no-deps") or env_true(prefix + "NO_DEPS"),
        force_reinstall=flag("force-reinstall"),
        require_hashes=flag("require-hashes") or env_true(prefix + "REQUIRE_HASHES"),
        index_strategy=(values("index-strategy") or [uv_env.get("UV_INDEX_STRATEGY", "")])[-1]
        or None,
        upgrade_strategy=strategy or None if tool == "pip" else None,
    )


def read_install(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> InstallCommand | None:
    """The install command that ``argv`` (one simple command's words) runs, or None.

    Leading ``NAME=value`` words and ``env NAME=value`` settings fold in over ``environ``.
    """
    words = list(argv)
    inline: dict[str, str] = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        inline[name] = value
    hit = pip_invocation(strip_wrappers(words, inline))
    if hit is None or hit[1] != "install":
        return None
    tool, _, args = hit
    return parse_install(tool, args, {**(environ or {}), **inline})


_PINGUARD = re.compile(r"pinguard([-.\w]*\.pyz)?")


def is_guard_call(argv: Sequence[str]) -> bool:
    """True for ``pinguard guard ...``, ``python -m pinguard guard``, ``x.pyz guard``."""
    for k, word in enumerate(argv):
        module = k > 0 and argv[k - 1] == "-m" and word == "pinguard"
        if module or _PINGUARD.fullmatch(basename(word)):
            return k + 1 < len(argv) and argv[k + 1] == "guard"
    return False
