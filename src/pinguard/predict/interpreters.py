"""Which Python environment a command of a ``RUN`` step acts on, in a predicted state.

A state knows its environments (the audit's snapshot) and the virtual environments earlier
steps made, empty ones included. From them this module lists the interpreters a shell in
the build could start (`interpreters`): every ``PREFIX/lib/pythonX.Y/site-packages``
environment is the Python at ``PREFIX/bin`` (a virtual environment, conda, or python.org's
build under ``/usr/local``), and a Debian or Ubuntu system Python (``python3.X`` from dpkg, or
apt's ``/usr/lib/python3/dist-packages``) is ``/usr/bin/python3``, whose pip run as root
installs into ``/usr/local/lib/python3.X/dist-packages`` and which also imports apt's
directories. `find_interpreter` finds the one a command word names, by its path or through
``PATH`` as the shell would (a ``pip`` word needs an interpreter with pip installed).
`venv_seeds` says what ``python -m venv`` puts into a new environment: ensurepip's bundled
pip (and setuptools before Python 3.12), whose versions are known only where dpkg says them
(Debian's ``python3-pip-whl`` and ``python3-setuptools-whl``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.models import Distribution, Environment, Snapshot, interpreter_path
from pinguard.predict.base import DEFAULT_PATH

_SITE = re.compile(r"^(?P<prefix>/.*?)/lib/python(?P<version>3\.\d+)/site-packages$")
_DEB_PYTHON = re.compile(r"^python(3\.\d+)(-minimal)?$")
_SYSTEM_PREFIXES = ("/usr", "/usr/local")
_PYTHON_WORD = re.compile(r"^python(3(\.\d+)?)?$")
_PIP_WORD = re.compile(r"^pip(3(\.\d+)?)?$")


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A Python a build step can run: where its executables are and where it installs."""

    prefix: str  # /opt/venv, /usr/local, /usr
    python: str | None  # "3.11" or "3.11.2"
    site: str  # the environment pip and uv install into as root
    venv: bool  # a virtual environment (or any non-system prefix)
    debian: bool = False  # Debian's /usr/bin/python3 (installs into /usr/local/.../dist-packages)

    @property
    def bin_dirs(self) -> tuple[str, ...]:
        if self.debian:  # pip upgraded as root lands in /usr/local/bin, still Debian's python
            return ("/usr/bin", "/usr/local/bin")
        return (f"{self.prefix}/bin",)

    def environment(self, snapshot: Snapshot) -> Environment:
        """Its install environment as the state has it (empty when nothing is there yet)."""
        found = snapshot.environment(self.site)
        return found if found is not None else Environment(self.site, self.site_python)

    @property
    def site_python(self) -> str | None:
        """The Python version the catalog would give its environment: the pyvenv.cfg's full
        version for a virtual environment, X.Y from the path otherwise."""
        if self.venv or self.python is None:
            return self.python
        return ".".join(self.python.split(".")[:2])

    def visible(self, snapshot: Snapshot) -> tuple[Environment, ...]:
        """The other environments it imports from (apt's, for Debian's python3)."""
        mine = self.environment(snapshot)
        return tuple(
            e for e in interpreter_path(mine, (*snapshot.environments, mine)) if e.path != self.site
        )

    def has_pip(self, snapshot: Snapshot) -> bool:
        envs = (self.environment(snapshot), *self.visible(snapshot))
        return any(d.name == "pip" for e in envs for d in e.distributions)


def upstream_version(debian: str) -> str | None:
    """``23.0.1+dfsg-1`` -> ``23.0.1``; ``1:3.11.2-6`` -> ``3.11.2``; None when not PEP 440."""
    text = debian.split(":", 1)[-1]
    text = text.rsplit("-", 1)[0] if "-" in text else text
    text = text.split("+", 1)[0].split("~", 1)[0]
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def debian_python(snapshot: Snapshot) -> str | None:
    """The full version of the Debian system Python (``3.11.2``), or X.Y, or None."""
    found: dict[str, str] = {}
    for deb in snapshot.debs:
        m = _DEB_PYTHON.match(deb.name)
        if m:
            found.setdefault(m.group(1), upstream_version(deb.version) or m.group(1))
    if found:
        best = max(found, key=lambda v: tuple(int(x) for x in v.split(".")))
        return found[best]
    shared = snapshot.environment("/usr/lib/python3/dist-packages")
    return shared.python if shared is not None else None


def interpreters(snapshot: Snapshot, venvs: Mapping[str, str | None]) -> list[Interpreter]:
    """Every interpreter the state has: one per ``PREFIX/lib/pythonX.Y/site-packages``
    environment and per virtual environment made earlier, and Debian's system python3."""
    out: dict[str, Interpreter] = {}
    for env in snapshot.environments:
        m = _SITE.match(env.path)
        if m is None:
            continue
        prefix = m.group("prefix")
        out[prefix] = Interpreter(
            prefix=prefix,
            python=env.python or m.group("version"),
            site=env.path,
            venv=prefix not in _SYSTEM_PREFIXES,
        )
    for prefix, python in venvs.items():
        if prefix not in out and python is not None:
            site = f"{prefix}/lib/python{'.'.join(python.split('.')[:2])}/site-packages"
            out[prefix] = Interpreter(prefix=prefix, python=python, site=site, venv=True)
    debian = debian_python(snapshot)
    if debian is not None and "/usr/local" not in out:
        short = ".".join(debian.split(".")[:2])
        out["/usr"] = Interpreter(
            prefix="/usr",
            python=debian,
            site=f"/usr/local/lib/python{short}/dist-packages",
            venv=False,
            debian=True,
        )
    return sorted(out.values(), key=lambda i: i.prefix)


def find_interpreter(
    word: str,
    snapshot: Snapshot,
    venvs: Mapping[str, str | None],
    environ: Mapping[str, str],
    cwd: str,
) -> tuple[Interpreter | None, str]:
    """The interpreter the command word ``word`` (``pip``, ``python3``, ``/opt/venv/bin/pip``)
    runs, and when there is none, why: by its directory when it names one, else through
    ``PATH`` (a ``pip`` word only where that interpreter has pip)."""
    found = interpreters(snapshot, venvs)
    base = posixpath.basename(word)
    wants_pip = _PIP_WORD.match(base) is not None
    if not wants_pip and _PYTHON_WORD.match(base) is None:
        return None, f"{word!r} is not a Python or pip executable pinguard knows"
    if "/" in word:
        directory = posixpath.normpath(posixpath.join(cwd, posixpath.dirname(word)))
        for interp in found:
            if directory in interp.bin_dirs:
                if wants_pip and not interp.has_pip(snapshot):
                    return None, f"{word} does not exist: the Python at {interp.prefix} has no pip"
                return interp, ""
        return None, f"no Python environment pinguard knows has {word}"
    path = environ.get("PATH", DEFAULT_PATH)
    for entry in path.split(":"):
        directory = posixpath.normpath(entry) if entry else ""
        for interp in found:
            if directory in interp.bin_dirs and (not wants_pip or interp.has_pip(snapshot)):
                return interp, ""
    what = "pip" if wants_pip else "Python"
    return None, f"no {what} on PATH ({path}) in the state the earlier steps left"


def venv_seeds(interp: Interpreter, snapshot: Snapshot) -> tuple[tuple[str, str], ...] | None:
    """``(name, version)`` of what ``python -m venv`` installs into a new environment with
    ``interp`` (ensurepip's bundled wheels), or None when their versions are not known."""
    if not interp.debian:
        return None
    debs = {deb.name: deb.version for deb in snapshot.debs}
    short = tuple(int(x) for x in (interp.python or "3.12").split(".")[:2])
    wanted = ["pip"] if short >= (3, 12) else ["pip", "setuptools"]
    seeds: list[tuple[str, str]] = []
    for name in wanted:
        raw = debs.get(f"python3-{name}-whl")
        version = upstream_version(raw) if raw is not None else None
        if version is None:
            return None
        seeds.append((name, version))
    return tuple(seeds)


def seeded(site: str, seeds: tuple[tuple[str, str], ...]) -> tuple[Distribution, ...]:
    """The seed distributions as the catalog would list them in ``site``."""
    return tuple(
        Distribution(
            name=canonicalize_name(name),
            raw_version=version,
            metadata_path=f"{site}/{name.replace('-', '_')}-{version}.dist-info",
            installer="pip",
            fingerprint=f"predicted:venv-seed:{name}=={version}",
        )
        for name, version in seeds
    )
