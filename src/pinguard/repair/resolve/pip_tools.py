"""Running pip-tools' resolver (``pip-compile``) for users who ask for ``--resolver pip-tools``.

pip-compile uses pip's resolver, so it resolves for the Python that runs it: it has no
``--python-version``/``--python-platform``. This adapter therefore runs the ``pip-compile``
next to the current interpreter and records, as a note, when the image's Python differs.
Constraints go in through a ``-c`` line of the input file (pip-compile's own way), indexes
through ``--index-url``/``--extra-index-url``/``--find-links`` and ``--pre``. Failures come
back as a :class:`CompileResult` holding pip's ``ResolutionImpossible`` text.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pinguard.errors import ResolveError
from pinguard.repair.resolve.index import TargetEnvironment
from pinguard.repair.resolve.uv import CompileResult, IndexOptions, network_failure, parse_pins, run


def pip_compile_bin() -> str:
    """The ``pip-compile`` next to this interpreter, else on PATH, else ResolveError."""
    local = Path(sys.executable).with_name("pip-compile")
    if local.exists():
        return str(local)
    found = shutil.which("pip-compile")
    if found is None:
        raise ResolveError("pip-tools is not installed: pip install pip-tools")
    return found


def host_mismatch(target: TargetEnvironment) -> str | None:
    """A note when pip-compile's host Python is not the image's Python."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if target.major_minor and target.major_minor != here:
        return (
            f"pip-tools resolved for this machine's Python {here}, "
            f"not the image's Python {target.major_minor}"
        )
    return None


def compile_requirements(
    requirements: Sequence[str],
    constraints: Sequence[str] = (),
    *,
    index: IndexOptions,
    target: TargetEnvironment,
    timeout: float = 300.0,
) -> CompileResult:
    """Resolve ``requirements`` under ``constraints`` with pip-compile."""
    with tempfile.TemporaryDirectory(prefix="pinguard-piptools-") as tmp:
        lines = [f"{r}\n" for r in requirements]
        if constraints:
            cons = Path(tmp, "constraints.txt")
            cons.write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
            lines.insert(0, f"-c {cons}\n")
        req = Path(tmp, "requirements.in")
        req.write_text("".join(lines), encoding="utf-8")
        out = Path(tmp, "requirements.txt")
        command = [
            pip_compile_bin(),
            "--quiet",
            "--no-header",
            "--no-annotate",
            "--no-emit-index-url",
            "--cache-dir",
            str(Path(tmp, "cache")),
            "--output-file",
            str(out),
        ]
        if index.no_index:
            command.append("--no-index")
        elif index.index_url:
            command += ["--index-url", index.index_url]
        for url in index.extra_index_urls:
            command += ["--extra-index-url", url]
        for loc in index.find_links:
            command += ["--find-links", loc]
        if index.prerelease:
            command.append("--pre")
        command.append(str(req))
        proc = run(command, timeout=timeout, cwd=tmp)
        text = out.read_text(encoding="utf-8") if out.exists() else ""
    if proc.returncode == 0:
        return CompileResult(True, parse_pins(text), proc.stderr, tuple(command), "pip-tools")
    unreachable = network_failure(proc.stderr)
    if unreachable is not None:
        raise unreachable
    if "ResolutionImpossible" in proc.stderr or "conflict" in proc.stderr.lower():
        return CompileResult(False, (), proc.stderr, tuple(command), "pip-tools")
    raise ResolveError(f"pip-compile failed: {proc.stderr.strip() or proc.stdout.strip()}")
