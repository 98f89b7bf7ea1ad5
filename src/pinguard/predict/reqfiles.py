"""The files a predicted build can read, and pip's requirement-file format read from them.

`ContextFiles` is what a stage's filesystem is known to hold beyond its environments: the
files and directories ``COPY``/``ADD`` brought from the build context (or a heredoc wrote),
by their path in the image, latest copy first; a file a later ``RUN`` may have changed is
forgotten, so reading it is unpredictable rather than stale. `read_requirements` reads a
requirements or constraints file as pip does: comments, ``\\`` continuations, ``${VAR}``
from the environment, nested ``-r``/``-c`` relative to the file, index options (``-i``,
``--extra-index-url``, ``-f``, ``--no-index``, ``--pre``) and per-line ``--hash`` options;
what cannot be replayed outside the image (``-e``, local paths, a file the build context
did not provide) is listed in ``problems``, never guessed at.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pinguard.target import parse_requirement

MAX_FILE = 4 * 1024 * 1024  # a requirements file larger than this is not read
MAX_DEPTH = 16  # nested -r/-c levels
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
_COMMENT = re.compile(r"(^|\s+)#.*$")
# options a requirements file may hold that change nothing a resolver here must know
_HARMLESS = frozenset(
    {
        "--trusted-host",
        "--prefer-binary",
        "--only-binary",
        "--no-binary",
        "--use-feature",
        "--require-hashes",
        "--config-settings",
        "--global-option",
        "--hash",
    }
)


@dataclass(frozen=True, slots=True)
class ContextFiles:
    """Files a stage's filesystem is known to hold: ``(image path, source)`` pairs, newest
    first; a source is the host path of a context file or directory, the bytes a heredoc
    wrote, or None for a path a ``RUN`` may have changed (its content is not known)."""

    entries: tuple[tuple[str, Path | bytes | None], ...] = ()

    def add(self, path: str, source: Path | bytes | None) -> ContextFiles:
        return ContextFiles(((posixpath.normpath(path), source), *self.entries))

    def forget(self, path: str) -> ContextFiles:
        """The path's content is no longer known (a RUN named it)."""
        return self.add(path, None) if self.known(path) else self

    def known(self, path: str) -> bool:
        path = posixpath.normpath(path)
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p, _ in self.entries)

    def read(self, path: str) -> bytes | None:
        """The bytes at ``path`` when a copy from the context put them there, else None."""
        path = posixpath.normpath(path)
        for where, source in self.entries:
            if path == where:
                if source is None or isinstance(source, bytes):
                    return source
                return _read_host(source)
            if path.startswith(where.rstrip("/") + "/"):
                if not isinstance(source, Path):
                    return None
                rel = path[len(where.rstrip("/")) + 1 :]
                if rel.startswith("../") or "/../" in f"/{rel}/":
                    return None
                return _read_host(source / rel)
        return None

    def rebased(self, src: str, dest: str) -> Iterator[tuple[str, Path | bytes | None]]:
        """The entries at or below ``src``, as ``COPY --from`` puts them under ``dest``."""
        src = posixpath.normpath(src)
        for where, source in reversed(self.entries):
            if where == src:
                yield dest, source
            elif where.startswith(src.rstrip("/") + "/"):
                yield posixpath.join(dest, where[len(src.rstrip("/")) + 1 :]), source
            elif src.startswith(where.rstrip("/") + "/") and isinstance(source, Path):
                yield dest, source / src[len(where.rstrip("/")) + 1 :]


def _read_host(path: Path) -> bytes | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE:
            return None
        return path.read_bytes()
    except OSError:
        return None


@dataclass(slots=True)
class RequirementSet:
    """What one install reads from its requirement and constraint files, flattened."""

    requirements: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    pre: bool = False
    problems: list[str] = field(default_factory=list)  # what makes the install unpredictable


def _logical_lines(text: str) -> Iterator[str]:
    """pip's preprocessing: join ``\\`` continuations (a comment line ends one), drop
    comments (``#`` at the start or after whitespace) and blank lines."""
    joined: list[str] = []
    pending: list[str] = []
    for raw in text.splitlines():
        comment = _COMMENT.match(raw) is not None
        if not raw.endswith("\\") or comment:
            joined.append("".join([*pending, " " + raw if comment else raw]))
            pending = []
        else:
            pending.append(raw.strip("\\"))
    if pending:
        joined.append("".join(pending))
    for text_line in joined:
        line = _COMMENT.sub("", text_line).strip()
        if line:
            yield line


def _split_option(line: str) -> tuple[str, str]:
    """``-r x``, ``-rx``, ``--requirement=x`` -> (option, value)."""
    if line.startswith("--"):
        name, eq, value = line.partition("=")
        if not eq:
            name, _, value = line.partition(" ")
        return name.strip(), value.strip()
    return line[:2], line[2:].strip()


_LONG = {
    "-r": "--requirement",
    "-c": "--constraint",
    "-e": "--editable",
    "-i": "--index-url",
    "-f": "--find-links",
}


def read_requirements(
    path: str,
    files: ContextFiles,
    environ: Mapping[str, str],
    out: RequirementSet,
    *,
    constraint: bool = False,
    depth: int = 0,
) -> None:
    """Read the requirements (or, with ``constraint``, constraints) file at the image path
    ``path`` into ``out``."""
    what = "constraints" if constraint else "requirements"
    if depth > MAX_DEPTH:
        out.problems.append(f"{what} file {path} nests -r/-c more than {MAX_DEPTH} levels")
        return
    data = files.read(path)
    if data is None:
        why = (
            "an earlier RUN may have changed it"
            if files.known(path)
            else "it is not copied from the build context (pinguard cannot see files the base "
            "image or a RUN made)"
        )
        out.problems.append(f"reads the {what} file {path}, whose content is not known: {why}")
        return
    text = data.decode("utf-8", "replace")
    here = posixpath.dirname(path)
    for raw in _logical_lines(text):
        line = _ENV_VAR.sub(lambda m: environ.get(m.group(1), m.group(0)), raw)
        if line.startswith("-"):
            option, value = _split_option(line)
            option = _LONG.get(option, option)
            if option in ("--requirement", "--constraint"):
                nested = posixpath.normpath(posixpath.join(here, value))
                read_requirements(
                    nested,
                    files,
                    environ,
                    out,
                    constraint=constraint or option == "--constraint",
                    depth=depth + 1,
                )
            elif option == "--editable":
                out.problems.append(f"{path}: installs the editable {value} (a local source)")
            elif option == "--index-url":
                out.index_url = value
            elif option == "--extra-index-url":
                out.extra_index_urls.append(value)
            elif option == "--find-links":
                out.find_links.append(value)
            elif option == "--no-index":
                out.no_index = True
            elif option == "--pre":
                out.pre = True
            elif option not in _HARMLESS:
                out.problems.append(f"{path}: option {line!r} is not modelled")
            continue
        requirement = line.split(" --", 1)[0].strip()  # per-line --hash and friends
        if "${" in requirement:
            out.problems.append(f"{path}: {requirement!r} uses a variable with no value")
        elif parse_requirement(requirement) is None:
            out.problems.append(f"{path}: {requirement!r} is a local path or not a requirement")
        elif constraint:
            out.constraints.append(requirement)
        else:
            out.requirements.append(requirement)


def ignore_patterns(context: Path) -> list[tuple[bool, str]]:
    """The ``.dockerignore`` patterns of a build context as (negated, pattern)."""
    try:
        text = (context / ".dockerignore").read_text(encoding="utf-8")
    except OSError:
        return []
    out: list[tuple[bool, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        out.append((negated, pattern))
    return out


def ignored(rel: str, patterns: list[tuple[bool, str]]) -> bool:
    """Whether ``.dockerignore`` leaves the context path ``rel`` out (a pattern matches it
    or a directory above it; the last matching pattern decides)."""
    parts = rel.split("/")
    result = False
    for negated, pattern in patterns:
        glob = pattern.replace("**/", "*").replace("/**", "/*")
        for i in range(1, len(parts) + 1):
            if fnmatch.fnmatchcase("/".join(parts[:i]), glob):
                result = not negated
                break
    return result


def python_metadata(root: Path, patterns: list[tuple[bool, str]], context: Path) -> str | None:
    """The first path below a host directory that is Python metadata or an environment
    (``*.dist-info``, ``*.egg-info`` inside one, ``site-packages``, ``pyvenv.cfg``), as a
    relative path, or None; ``.dockerignore`` applies."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, context).replace(os.sep, "/")
        keep = []
        for d in sorted(dirnames):
            rel = posixpath.normpath(f"{rel_dir}/{d}")
            if ignored(rel, patterns):
                continue
            if d.endswith(".dist-info") or d in ("site-packages", "dist-packages"):
                return rel
            keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            rel = posixpath.normpath(f"{rel_dir}/{f}")
            if f == "pyvenv.cfg" and not ignored(rel, patterns):
                return rel
    return None
