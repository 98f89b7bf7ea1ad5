"""Runtime truth: what a process in the image really maps, beside what the audit predicts.

Static prediction is not the whole truth (packages load libraries themselves; glibc reuses a
soname already loaded), so ``probe`` runs the image's own Python inside a container of a
locally stored image (``buildah from`` + ``buildah run --isolation chroot``), imports the
named modules (or loads named libraries by path, as an extension module would), and reads
``/proc/self/maps``. The prediction comes from auditing the same container's root filesystem
(``buildah mount``, read as a ``dir:`` source): for each watched soname the process mapped,
the file the resolutions of the loaded packages' consumers give. A disagreement is a
finding. The image is named as the audit names it (``sources.resolve_reference``): a name
in local storage (``localhost/app:1``, ``containers-storage:NAME``), or a local OCI archive,
docker archive or OCI layout (``app.tar``, ``oci-archive:app.tar:TAG``), which buildah imports
into local storage to run; a root filesystem (``dir:``) is refused, since nothing there says how
to run it, and so is a path that does not exist. This sits beside the CLI, above the audit,
like the in-build guard: it starts processes, which nothing below it does.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from pinguard.audit.pipeline import audit_directory
from pinguard.catalog.native.loader import WATCHED
from pinguard.errors import PinguardError, SourceError, UsageError
from pinguard.models import AuditResult

#: What runs inside the container: imports/loads in order, then the mapped files and sys.path.
_SCRIPT = """
import ctypes, importlib, json, sys
for kind, name in json.loads(sys.argv[1]):
    if kind == "import":
        importlib.import_module(name)
    else:
        ctypes.CDLL(name)
rows = [line.split(None, 5) for line in open("/proc/self/maps")]
maps = sorted({r[5].strip() for r in rows if len(r) == 6 and r[5].startswith("/")})
print(json.dumps({"maps": maps, "path": sys.path}))
"""


class ProbeError(PinguardError):
    """The probe could not run in the image (exit 3: the image could not be read or run)."""

    exit_code = SourceError.exit_code


@dataclass(frozen=True, slots=True)
class ProbeRow:
    """One soname the process mapped: the file it mapped and the file predicted for it."""

    soname: str
    observed: str
    predicted: tuple[str, ...]  # the files the loaded packages' resolutions give
    basis: str  # "preload", "search" or "" (nothing predicted)

    @property
    def agrees(self) -> bool:
        return not self.predicted or self.predicted == (self.observed,)

    def to_json(self) -> dict[str, object]:
        return {
            "soname": self.soname,
            "observed": self.observed,
            "predicted": list(self.predicted),
            "basis": self.basis or None,
            "agrees": self.agrees,
        }


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe saw and what the audit of the same root predicted."""

    image: str
    loads: tuple[tuple[str, str], ...]  # ("import", module) | ("load", path), in order
    rows: tuple[ProbeRow, ...]
    mapped: tuple[str, ...]  # every file the process mapped

    @property
    def disagreements(self) -> tuple[ProbeRow, ...]:
        return tuple(r for r in self.rows if not r.agrees)


def _buildah() -> str:
    found = shutil.which("buildah")
    if found is None:
        raise ProbeError("probe needs buildah on PATH to run the image (apt-get install buildah)")
    return found


def buildah_reference(text: str) -> str:
    """What ``buildah from`` is given for the image ``text`` names, read as the audit reads
    it: a local archive or layout by its transport (``pg.tar`` -> ``oci-archive:pg.tar``), a
    name as it stands (local storage; nothing is pulled). Raises ``UsageError`` for a root
    filesystem and what ``resolve_reference`` raises (``no such file: PATH``)."""
    from pinguard.sources import resolve_reference

    ref = resolve_reference(text)
    if ref.transport == "dir":
        raise UsageError(
            f"probe runs an image; {text} is a {ref.kind} (dir:), which has no image config "
            "to run it by: give an image archive, an OCI layout or a name in local storage"
        )
    return ref.canonical


def _tool_message(output: str) -> str:
    """The last lines a failed tool printed, as one clause of pinguard's own message: each
    line without the tool's ``Error:`` prefix, blank and repeated lines dropped, joined by
    ``; `` (``Error: x: image not known`` -> ``x: image not known``)."""
    lines: list[str] = []
    for raw in output.strip().splitlines()[-3:]:
        line = raw.strip()
        if line[:6].lower() == "error:":
            line = line[6:].strip()
        if line and line not in lines:
            lines.append(line)
    return "; ".join(lines) or "no message"


def _run(cmd: Sequence[str], what: str) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = _tool_message(done.stderr or done.stdout)
        raise ProbeError(f"{what} failed (exit {done.returncode}): {message}")
    return done.stdout


def _from(buildah: str, image: str) -> str:
    """A working container of ``image`` (never pulled); its name."""
    try:
        out = _run([buildah, "from", "--pull=never", image], f"buildah from {image}")
    except ProbeError as exc:
        if "image not known" not in str(exc):
            raise
        raise ProbeError(
            f"{exc} (probe runs an image in local storage or a local archive and pulls "
            "nothing: podman pull it first, or give its archive)"
        ) from None
    return out.strip().splitlines()[-1]


def observe(image: str, loads: Sequence[tuple[str, str]], python: str = "python3") -> list[str]:
    """The files a process of ``image`` maps after the ``loads`` (real paths in the image)."""
    if not loads:
        raise UsageError("probe: name at least one --import MODULE or --load PATH")
    buildah = _buildah()
    container = _from(buildah, image)
    try:
        out = _run(
            [
                buildah,
                "run",
                "--isolation",
                "chroot",
                container,
                "--",
                python,
                "-c",
                _SCRIPT,
                json.dumps(list(loads)),
            ],
            f"{python} in {image}",
        )
    finally:
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)
    try:
        return [str(m) for m in json.loads(out.strip().splitlines()[-1])["maps"]]
    except (ValueError, KeyError, IndexError) as exc:
        raise ProbeError(f"the probe in {image} printed no map: {out[-200:]!r}") from exc


def predict(image: str) -> AuditResult:
    """The audit of the image's root filesystem, as a container of it mounts it."""
    buildah = _buildah()
    container = _from(buildah, image)
    try:
        root = _run([buildah, "mount", container], f"buildah mount {image}").strip()
        return audit_directory(root, reference=image)
    finally:
        subprocess.run([buildah, "umount", container], capture_output=True, check=False)
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)


def compare(
    image: str,
    loads: Sequence[tuple[str, str]],
    mapped: Sequence[str],
    result: AuditResult,
    watched: Sequence[str] = WATCHED,
) -> ProbeResult:
    """Each watched soname the process mapped, beside what the loaded packages' consumers
    resolve it to (the consumers owned by an imported package, or those loaded by path)."""
    imported = {canonicalize_name(n.split(".")[0]) for kind, n in loads if kind == "import"}
    loaded = {n for kind, n in loads if kind == "load"}
    libs = {lib.path: lib for lib in result.final.native}
    rows: list[ProbeRow] = []
    for path in mapped:
        base = posixpath.basename(path)
        lib = libs.get(path)
        soname = (lib.soname if lib and lib.soname else None) or base
        if not any(fnmatch.fnmatchcase(soname, w) for w in watched):
            continue
        # what the loaded packages' consumers resolve it to, by basis: a preload decides
        # before any search, so when one applies it is the prediction
        by_basis: dict[str, set[str]] = {}
        for res in result.final.resolutions:
            if res.needed != soname or res.real is None:
                continue
            consumer = libs.get(res.consumer)
            owner = canonicalize_name(consumer.owner) if consumer and consumer.owner else None
            if res.consumer in loaded or (owner is not None and owner in imported):
                by_basis.setdefault(res.basis, set()).add(res.real)
        basis = "preload" if "preload" in by_basis else ("search" if by_basis else "")
        predicted = by_basis.get(basis, set())
        rows.append(ProbeRow(soname, path, tuple(sorted(predicted)), basis))
    rows.sort(key=lambda r: (r.soname, r.observed))
    return ProbeResult(image, tuple(loads), tuple(rows), tuple(mapped))


def probe(
    image: str, loads: Sequence[tuple[str, str]], python: str = "python3"
) -> tuple[ProbeResult, AuditResult]:
    """Run the loads in ``image`` (any reference ``buildah_reference`` takes) and compare
    with the audit of its root filesystem."""
    target = buildah_reference(image)
    if not loads:
        raise UsageError("probe: name at least one --import MODULE or --load PATH")
    mapped = observe(target, loads, python)
    result = predict(target)
    return compare(target, loads, mapped, result), result
