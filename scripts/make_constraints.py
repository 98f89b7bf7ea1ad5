"""Regenerate constraints/glm-serving-cu13.txt from a build of the real CUDA 13 dependency set.

What it does (see constraints/README.md for why each step is what it is):

1. resolves the GLM serving set on PyPI with uv, metadata only: ``torch==2.12.1`` (the CUDA 13
   build PyPI serves for linux x86_64), ``flashinfer-python``, ``nvidia-cutlass-dsl``, with
   ``nvidia-nccl-cu13==2.30.3`` as an override (torch 2.12.1 pins ``==2.29.7``), for CPython
   3.11 on x86_64 manylinux_2_36 (the test base image: Debian bookworm), and once more without
   the override (for the 2.29.7 side);
2. reads each resolved package's real core metadata from PyPI (PEP 658 ``.metadata`` files via
   pinguard's index client: name, version, Requires-Dist, Requires-Python; no whole wheel);
3. builds a metadata-only wheel per package (tests/infra/wheels.py) into a local index, since
   the real wheels are several GB (torch alone about 900 MB, cuDNN and cuBLAS more);
4. builds an image from the test base with buildah and real ``RUN pip install`` steps: the set
   as pip resolves it (NCCL 2.29.7, as torch pins), the override step that installs NCCL 2.30.3
   with ``--no-deps``, then a bad step that re-installs torch and silently puts 2.29.7 back;
5. runs ``pinguard constraints`` on that image with policies/glm-serving-gb10.toml and writes
   constraints/glm-serving-cu13.txt, and ``--format pylock`` against PyPI for
   constraints/pylock.glm-serving-cu13.toml (the real wheels' URLs and sha256).

Usage: ``python scripts/make_constraints.py [--out constraints/glm-serving-cu13.txt]
[--cache DIR] [--download-real-wheels]``. Needs root, buildah, skopeo and network access to
PyPI. ``--download-real-wheels`` also runs ``pip download --no-deps`` of the key real wheels
(torch, nvidia-nccl-cu13 2.29.7/2.30.3, nvidia-cutlass-dsl, flashinfer-python) into the cache
and prints their sizes and sha256, without installing them.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packaging.utils import canonicalize_name  # noqa: E402
from packaging.version import Version  # noqa: E402
from tests.infra.build import build_image, ensure_base_image  # noqa: E402
from tests.infra.index import serve_index  # noqa: E402
from tests.infra.wheels import WheelSpec, build_wheels  # noqa: E402

from pinguard.audit.pipeline import audit_image  # noqa: E402
from pinguard.cli import main as pinguard  # noqa: E402
from pinguard.models import Platform  # noqa: E402
from pinguard.repair.resolve.index import (  # noqa: E402
    IndexFetchError,
    SimpleIndex,
    TargetEnvironment,
    _wheel_metadata,
    parse_metadata,
)
from pinguard.repair.resolve.uv import uv_bin  # noqa: E402

PYPI = "https://pypi.org/simple/"
PYTHON = "3.11"  # the test base image's Python (Debian bookworm)
UV_PLATFORM = "x86_64-manylinux_2_36"  # bookworm's glibc 2.36
EXCLUDE_NEWER = "2026-12-01T00:00:00Z"  # the resolution as of this date, so reruns agree
TOP = ("torch==2.12.1", "flashinfer-python==0.7.4", "nvidia-cutlass-dsl==4.8.1")
GOOD_NCCL = "nvidia-nccl-cu13==2.30.3"
BAD_NCCL = "nvidia-nccl-cu13==2.29.7"
# pip download matches --platform tags literally: every manylinux tag glibc 2.36 accepts.
PIP_PLATFORMS = (
    *(f"manylinux_2_{m}_x86_64" for m in range(36, 16, -1)),
    "manylinux2014_x86_64",
    "linux_x86_64",
)
TAG = "localhost/pinguard-constraints/glm-serving-cu13:bad"
POLICY = ROOT / "policies" / "glm-serving-gb10.toml"
REAL_WHEELS = (
    "torch==2.12.1",
    GOOD_NCCL,
    BAD_NCCL,
    "nvidia-cutlass-dsl==4.8.1",
    "flashinfer-python==0.7.4",
)

DOCKERFILE = """\
FROM {base}
ARG INDEX_URL
COPY known-good.txt /tmp/known-good.txt
RUN pip install --no-deps --index-url $INDEX_URL -r /tmp/known-good.txt
RUN pip install --index-url $INDEX_URL torch==2.12.1
"""


def resolve(requirements: tuple[str, ...], overrides: tuple[str, ...], work: Path) -> list[str]:
    """``name==version`` lines uv resolves on PyPI for the target (metadata only)."""
    req = work / "requirements.in"
    req.write_text("".join(f"{r}\n" for r in requirements))
    command = [
        uv_bin(),
        "pip",
        "compile",
        str(req),
        "--no-config",
        "--no-header",
        "--no-annotate",
        "--python-version",
        PYTHON,
        "--python-platform",
        UV_PLATFORM,
        "--index-url",
        PYPI,
        "--exclude-newer",
        EXCLUDE_NEWER,
    ]
    if overrides:
        over = work / "overrides.txt"
        over.write_text("".join(f"{o}\n" for o in overrides))
        command += ["--override", str(over)]
    proc = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return [ln.strip() for ln in proc.stdout.splitlines() if "==" in ln and not ln.startswith("#")]


def _pip_download(pin: str, dest: Path) -> Path:
    """``pip download --no-deps`` one wheel for the target into ``dest``; its path."""
    dest.mkdir(parents=True, exist_ok=True)
    name = canonicalize_name(pin.partition("==")[0]).replace("-", "_")
    version = pin.partition("==")[2]
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON,
            *(f"--platform={tag}" for tag in PIP_PLATFORMS),
            "--index-url",
            PYPI,
            "-d",
            str(dest),
            pin,
        ],
        check=True,
        timeout=3600,
    )
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download of {pin} gave no wheel in {dest}")
    return found[0]


def real_specs(pins: set[str], cache: Path) -> list[WheelSpec]:
    """Metadata-only wheels carrying each package's real Requires-Dist and Requires-Python."""
    client = SimpleIndex((PYPI,))
    target = TargetEnvironment(PYTHON, Platform("linux", "amd64"))
    specs = []
    for pin in sorted(pins):
        name, _, version = pin.partition("==")
        file = client.best_file(name, Version(version), target)
        if file is None:
            raise SystemExit(f"no wheel of {pin} on PyPI")
        try:
            meta = client.metadata(file)
            how = f"PEP 658 metadata of {file.filename}"
        except IndexFetchError:
            wheel = _pip_download(pin, cache / "no-pep658")
            meta = parse_metadata(_wheel_metadata(wheel))
            how = f"METADATA inside {wheel.name} (the index has no PEP 658 file for it)"
        print(f"  {pin}: {how}", file=sys.stderr)
        specs.append(
            WheelSpec(
                str(meta.name),
                str(meta.version),
                requires_dist=meta.requires_dist,
                requires_python=meta.requires_python,
                files={},
                summary=f"metadata-only copy of {file.filename}",
            )
        )
    return specs


def download_real(cache: Path) -> None:
    """``pip download --no-deps`` the key real wheels; print size and sha256 of each."""
    for pin in REAL_WHEELS:
        wheel = _pip_download(pin, cache / "real-wheels")
        h = hashlib.sha256()
        with wheel.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        print(
            f"  {wheel.name}: {wheel.stat().st_size} bytes, sha256 {h.hexdigest()}", file=sys.stderr
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "constraints" / "glm-serving-cu13.txt")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "pinguard-constraints"
    )
    parser.add_argument("--download-real-wheels", action="store_true")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pinguard-make-constraints-") as tmp:
        work = Path(tmp)
        good = resolve(TOP, (GOOD_NCCL,), work)
        bad = resolve(TOP, (), work)
        print(
            f"resolved {len(good)} packages (override) and {len(bad)} (as pip would)",
            file=sys.stderr,
        )
        if GOOD_NCCL not in good or BAD_NCCL not in bad:
            raise SystemExit(f"PyPI no longer gives the story: {GOOD_NCCL} / {BAD_NCCL} missing")
        wheels = args.cache / "metadata-wheels"
        build_wheels(real_specs(set(good) | set(bad), args.cache), wheels)
        if args.download_real_wheels:
            download_real(args.cache)
        base = ensure_base_image()
        context = work / "context"
        context.mkdir()
        (context / "known-good.txt").write_text("".join(f"{p}\n" for p in good))
        with serve_index(wheels) as index:
            built = build_image(
                context,
                DOCKERFILE.format(base=base),
                TAG,
                {"INDEX_URL": index.url},
                timeout=1800,
            )
        if not built.ok:
            print(built.log, file=sys.stderr)
            raise SystemExit("the image build failed")
        layout = args.cache / "oci"
        subprocess.run(["rm", "-rf", str(layout)], check=True)
        subprocess.run(
            ["skopeo", "copy", f"containers-storage:{TAG}", f"oci:{layout}:bad"],
            check=True,
            timeout=1800,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        ref = f"oci:{layout}:bad"
        audit = audit_image(ref)
        bad_step = [s.index for s in audit.steps if "torch==2.12.1" in s.created_by][-1]
        # the known-good set just before the step that installed torch 2.12.1
        constraints = [
            "constraints",
            ref,
            "--policy",
            str(POLICY.relative_to(ROOT)),
            "--step",
            str(bad_step),
            "--no-cache",
        ]
        code = pinguard([*constraints, "-o", str(args.out)])
        if code != 0:
            return code
        # the same set as a PEP 751 lock of the real wheels on PyPI (URLs and sha256 from the
        # index, chosen by tags for CPython 3.11 on x86_64 with the image's glibc)
        code = pinguard(
            [
                *constraints,
                "--format",
                "pylock",
                "--index-url",
                PYPI,
                "-o",
                str(args.out.with_name(f"pylock.{args.out.stem}.toml")),
            ]
        )
        if code != 0:
            return code
    names = {canonicalize_name(p.partition("==")[0]) for p in good}
    print(
        f"wrote {args.out} ({len(names)} packages in the resolved known-good set)", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
