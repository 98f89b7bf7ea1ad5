"""Which file glibc's ld.so would load for each ``DT_NEEDED``, predicted from a state.

This module owns the search order, as a pure function over one state's view of the image
(regular files and symlinks, never the disk), the image config's ``Env`` and the
``/etc/ld.so.conf`` directories (read here: ``parse_ld_so_conf``; ``FileView`` is the state
as the search walks it). For an object with ``DT_NEEDED`` entries, each name with
no ``/`` is searched in glibc's order:

1. ``DT_RPATH`` of the object, only when it has no ``DT_RUNPATH``;
2. ``LD_LIBRARY_PATH`` from the image's environment;
3. ``DT_RUNPATH`` of the object;
4. the directories ``/etc/ld.so.conf`` (and its ``include`` files) names, standing in for
   ``/etc/ld.so.cache``, which ``ldconfig`` builds from them: a file named like the entry,
   or a library whose ``DT_SONAME`` is the entry, as ``ldconfig`` would link it;
5. the default directories (Debian's multiarch ones and ``/lib``, ``/usr/lib`` when the
   image has a dpkg database; else ``/lib64``, ``/usr/lib64``, ``/lib``, ``/usr/lib``).

``$ORIGIN`` (and ``${ORIGIN}``) expands to the directory of the object, ``$LIB`` to
``lib64`` or the multiarch directory, ``$PLATFORM`` to the machine. Symlinks are followed,
for directories and files, inside the image's own tree. Limits (docs/native.md): the RPATH
of the objects that loaded this one (the executable's, say) is not searched, libraries
already loaded under the same soname are not reused, ``glibc-hwcaps`` subdirectories are not
searched, and an ``ld.so.cache`` that ``ldconfig`` was not re-run for is taken as fresh.
Libraries a package loads itself on import (``pinguard.catalog.native.preload``) override the
search for the consumers of that package and of packages that require it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from pinguard.catalog.native.preload import Preload, preloads
from pinguard.layers.links import resolve
from pinguard.models import Environment, NativeLibrary, Resolution


def is_ld_so_conf(path: str) -> bool:
    """``/etc/ld.so.conf`` and the ``*.conf`` files of ``/etc/ld.so.conf.d``."""
    return path == "/etc/ld.so.conf" or (
        path.startswith("/etc/ld.so.conf.d/") and path.endswith(".conf") and path.count("/") == 3
    )


def parse_ld_so_conf(files: Mapping[str, bytes], path: str = "/etc/ld.so.conf") -> tuple[str, ...]:
    """The directories ``ldconfig`` reads from ``path`` and its ``include`` globs, in order.

    Comments (``#``) and blank lines are ignored; ``include`` patterns are expanded over the
    captured files in sorted order, as glob(3) sorts them. A file is read at most once.
    """
    out: list[str] = []
    seen: set[str] = set()

    def read(p: str) -> None:
        if p in seen or p not in files:
            return
        seen.add(p)
        for raw in files[p].decode("utf-8", "replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include") and line[7:8] in {" ", "\t"}:
                for raw_pattern in line[8:].split():
                    pattern = raw_pattern
                    if not pattern.startswith("/"):
                        pattern = posixpath.join(posixpath.dirname(p), pattern)
                    for match in sorted(f for f in files if fnmatch.fnmatchcase(f, pattern)):
                        read(match)
                continue
            if line.startswith("hwcap"):
                continue
            for d in re.split(r"[:\s,]+", line):
                if d.startswith("/"):
                    out.append(posixpath.normpath(d))

    read(path)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class FileView:
    """The regular files and symlinks of a state (absolute, normalised paths).

    ``memo`` keeps what ``resolve`` found, by path; a caller may hand the same memo to the
    views of later states while their ``links`` are the same (the native session does)."""

    files: frozenset[str]
    links: Mapping[str, str]  # path -> link target as stored (relative or absolute)
    memo: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def resolve(self, path: str) -> str | None:
        """``path`` with every symlink in it resolved inside the root (None on a loop)."""
        memo = self.memo
        if path in memo:
            return memo[path]
        found = memo[path] = resolve(path, self.links)
        return found

    def real_file(self, path: str) -> str | None:
        """The regular file ``path`` names after symlinks, or None if there is none."""
        real = self.resolve(path)
        return real if real is not None and real in self.files else None


#: The multiarch triplet Debian uses per machine (``platform_machine``).
TRIPLETS = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "ppc64le": "powerpc64le-linux-gnu",
    "s390x": "s390x-linux-gnu",
    "i686": "i386-linux-gnu",
    "armv7l": "arm-linux-gnueabihf",
    "riscv64": "riscv64-linux-gnu",
}


@dataclass(frozen=True, slots=True)
class LoaderConfig:
    """What the loader reads besides the objects: environment, ld.so.conf, defaults."""

    ld_library_path: tuple[str, ...] = ()
    conf_dirs: tuple[str, ...] = ()
    default_dirs: tuple[str, ...] = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
    machine: str = "x86_64"

    @classmethod
    def of(
        cls,
        env: Sequence[str],
        conf_dirs: Sequence[str],
        *,
        machine: str = "x86_64",
        debian: bool = False,
    ) -> LoaderConfig:
        """From the image config's ``Env`` (``KEY=value`` strings) and ld.so.conf dirs."""
        llp = ""
        for item in env:
            key, sep, value = item.partition("=")
            if sep and key == "LD_LIBRARY_PATH":
                llp = value
        # glibc: ':' and ';' separate; an empty element means the current directory,
        # which is unknowable from the image, so it is left out (docs/native.md)
        dirs = tuple(d for d in llp.replace(";", ":").split(":") if d)
        if debian and machine in TRIPLETS:
            t = TRIPLETS[machine]
            defaults: tuple[str, ...] = (f"/lib/{t}", f"/usr/lib/{t}", "/lib", "/usr/lib")
        else:
            defaults = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
        return cls(dirs, tuple(conf_dirs), defaults, machine)


def expand(entry: str, origin: str, config: LoaderConfig) -> str:
    """``$ORIGIN``, ``$LIB`` and ``$PLATFORM`` (braced or not) in one search path entry."""
    lib = f"lib/{TRIPLETS[config.machine]}" if config.machine in TRIPLETS else "lib64"
    out = entry
    for name, value in (("ORIGIN", origin), ("LIB", lib), ("PLATFORM", config.machine)):
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    return posixpath.normpath(out) if out.startswith("/") else out


def resolve_needed(
    lib: NativeLibrary,
    view: FileView,
    config: LoaderConfig,
    by_soname: Mapping[str, Sequence[str]],
) -> tuple[Resolution, ...]:
    """Where each ``DT_NEEDED`` of ``lib`` resolves, and through which search path.

    ``by_soname`` maps a ``DT_SONAME`` to the real paths of the libraries declaring it (for
    the ld.so.conf step, where ``ldconfig`` links sonames).
    """
    origin = posixpath.dirname(lib.path)
    out: list[Resolution] = []
    search: list[tuple[str, str]] = []
    if not lib.runpath:
        search += [("DT_RPATH", expand(d, origin, config)) for d in lib.rpath]
    search += [("LD_LIBRARY_PATH", d) for d in config.ld_library_path]
    search += [("DT_RUNPATH", expand(d, origin, config)) for d in lib.runpath]
    for needed in lib.needed:
        out.append(_one(lib.path, needed, search, view, config, by_soname))
    return tuple(out)


def _one(
    consumer: str,
    needed: str,
    search: Iterable[tuple[str, str]],
    view: FileView,
    config: LoaderConfig,
    by_soname: Mapping[str, Sequence[str]],
) -> Resolution:
    if "/" in needed:
        path = needed if needed.startswith("/") else posixpath.join("/", needed)
        real = view.real_file(path)
        return Resolution(consumer, needed, path if real else None, real, "path" if real else "")
    for via, directory in search:
        if not directory.startswith("/"):
            continue  # a relative entry depends on the working directory
        candidate = posixpath.join(directory, needed)
        real = view.real_file(candidate)
        if real is not None:
            return Resolution(consumer, needed, candidate, real, via, directory)
    for directory in config.conf_dirs:
        candidate = posixpath.join(directory, needed)
        real = view.real_file(candidate)
        if real is not None:
            return Resolution(consumer, needed, candidate, real, "ld.so.conf", directory)
        resolved_dir = view.resolve(directory)
        for target in sorted(by_soname.get(needed, ())):
            if resolved_dir is not None and posixpath.dirname(target) == resolved_dir:
                return Resolution(
                    consumer, needed, candidate, target, "ld.so.conf (soname)", directory
                )
    for directory in config.default_dirs:
        candidate = posixpath.join(directory, needed)
        real = view.real_file(candidate)
        if real is not None:
            return Resolution(consumer, needed, candidate, real, "default", directory)
    return Resolution(consumer, needed, None, None, "")


#: Sonames whose every consumer is resolved even when one file provides them: the libraries
#: GPU serving depends on (a policy pin on another soname judges its providers instead).
WATCHED = ("libnccl.so*", "libcudnn*.so*", "libcublas*.so*", "libcudart.so*")


def _requires(env: Environment) -> dict[str, frozenset[str]]:
    """Each distribution's name -> the names its Requires-Dist lines name."""
    out: dict[str, frozenset[str]] = {}
    for dist in env.distributions:
        names = set()
        for line in dist.requires_dist:
            m = _REQ_NAME.match(line)
            if m:
                names.add(canonicalize_name(m.group(0)))
        out[str(dist.name)] = frozenset(names)
    return out


_REQ_NAME = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*")


def _preloaded(
    lib: NativeLibrary,
    loaded: Sequence[Preload],
    requires: Mapping[str, Mapping[str, frozenset[str]]],
) -> dict[str, Preload]:
    """soname -> what the consumer's own package, or a package it requires, preloads."""
    if lib.owner_kind != "wheel" or lib.owner is None or lib.owner_environment is None:
        return {}
    owner = str(canonicalize_name(lib.owner))
    deps = requires.get(lib.owner_environment, {}).get(owner, frozenset())
    out: dict[str, Preload] = {}
    for pre in loaded:
        if pre.environment != lib.owner_environment:
            continue
        if pre.package == owner or pre.package in deps or owner.startswith(pre.package + "-"):
            out.setdefault(pre.soname, pre)
    return out


def resolve_state(
    libs: Sequence[NativeLibrary],
    view: FileView,
    config: LoaderConfig,
    watched: Sequence[str] = WATCHED,
    environments: Sequence[Environment] = (),
    loaded: Sequence[Preload] = (),
) -> tuple[Resolution, ...]:
    """Resolutions for every library that needs a watched soname or one provided twice.

    A soname is provided by a file named like it or declaring it as ``DT_SONAME``; provided
    twice means by two different regular files. Sorted by consumer, then ``DT_NEEDED`` order.
    A consumer whose package (or a package it requires) preloads a soname on import gets the
    preloaded file (``basis="preload"``, the search order's answer beside it); every other
    resolution is the search order's alone (``basis="search"``).
    """
    requires = {env.path: _requires(env) for env in environments}
    providers: dict[str, set[str]] = {}
    by_soname: dict[str, list[str]] = {}
    for lib in libs:
        name = posixpath.basename(lib.path)
        providers.setdefault(name, set()).add(lib.path)
        if lib.soname:
            providers.setdefault(lib.soname, set()).add(lib.path)
            by_soname.setdefault(lib.soname, []).append(lib.path)
    # symlinked names (libnccl.so.2 -> libnccl.so.2.28.9) provide their target's soname
    for link in view.links:
        real = view.real_file(link)
        if real is not None:
            providers.setdefault(posixpath.basename(link), set()).add(real)

    def interesting(soname: str) -> bool:
        return len(providers.get(soname, ())) > 1 or any(
            fnmatch.fnmatchcase(soname, w) for w in watched
        )

    preloaded = {pre.soname for pre in loaded}
    out: list[Resolution] = []
    for lib in sorted(libs, key=lambda x: x.path):
        if not any(interesting(n) or n in preloaded for n in lib.needed):
            continue
        first = _preloaded(lib, loaded, requires) if loaded else {}
        for r in resolve_needed(lib, view, config, by_soname):
            pre = first.get(r.needed)
            if pre is not None:
                real = view.real_file(pre.path)
                out.append(
                    dataclasses.replace(
                        r,
                        path=pre.path,
                        real=real,
                        via="preload",
                        directory=posixpath.dirname(pre.path),
                        basis="preload",
                        preloaded_by=f"{pre.package} ({pre.source})",
                        search_real=r.real,
                        search_via=r.via,
                    )
                )
            elif interesting(r.needed):
                out.append(r)
    return tuple(out)


#: dpkg's database: an image that has one takes Debian's multiarch default directories.
DPKG_STATUS = "/var/lib/dpkg/status"


@dataclass(slots=True)
class _Answered:
    """What one state's resolutions were computed from, and the resolutions."""

    libs: tuple[NativeLibrary, ...]
    files: frozenset[str]
    links: dict[str, str]
    config: LoaderConfig
    loaded: tuple[Preload, ...]
    environments: tuple[Environment, ...]
    resolutions: tuple[Resolution, ...]


class StepResolver:
    """The loader's resolutions over the states of one audit, a state at a time: a state whose
    inputs are those of the state before (the same libraries, files, links, loader
    configuration and preloads, and when something is preloaded the same environment
    objects) gets the answer computed for that state, without a search. Most layers of an
    image change no library (a pure-Python install, the application's files)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: _Answered | None = None

    def resolve(
        self,
        libs: Sequence[NativeLibrary],
        view: FileView,
        files: Mapping[str, bytes],
        environments: Sequence[Environment],
        env: Sequence[str],
        machine: str,
    ) -> tuple[Resolution, ...]:
        """The resolutions in one state: its ``libs``, the files and links (``view``), the
        captured files (``ld.so.conf`` and the package files the preload model reads), the
        state's environments (sorted by path) and the image's ``Env`` and machine."""
        config = LoaderConfig.of(
            env, parse_ld_so_conf(files), machine=machine, debian=DPKG_STATUS in files
        )
        loaded = preloads(environments, files, libs)
        libs = tuple(libs)
        last = self._last
        if (
            last is not None
            and last.config == config
            and last.loaded == loaded
            and last.files == view.files
            and last.links == view.links
            and last.libs == libs
            and (
                not loaded  # the environments are read for what a preloading package requires
                or (
                    len(last.environments) == len(environments)
                    and all(a is b for a, b in zip(last.environments, environments, strict=True))
                )
            )
        ):
            return last.resolutions
        found = resolve_state(libs, view, config, WATCHED, environments, loaded)
        self._last = _Answered(
            libs, view.files, dict(view.links), config, loaded, tuple(environments), found
        )
        return found
