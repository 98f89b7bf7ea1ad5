"""Libraries that Python packages load themselves, before the loader's search order matters.

glibc reuses a library already loaded under the same soname instead of searching
(elf/dl-load.c ``_dl_map_object``), so a package that ``dlopen``s a file by path on import
decides what every later consumer of that soname in the process gets, whatever its RPATH.
This module owns the model of the preloads that matter for GPU Python, each read from the
installed package's own files where they say it:

- torch (``torch/__init__.py``): ``_load_global_deps`` loads ``torch/lib/libtorch_global_deps.so``;
  when that maps a CUDA runtime, ``_preload_cuda_deps`` loads, for each ``(folder, glob)`` of
  its ``cuda_libs`` list (read from the installed ``__init__.py`` with ``ast``), the first
  match of ``nvidia/<folder>/lib/<glob>``, ``nvidia/cu<major>/lib/<glob>`` (``<major>`` from
  ``torch/version.py``'s ``cuda``) or ``<folder>/lib/<glob>`` in the first ``sys.path`` entry
  that has one (here: the environment's site-packages directory);
- CuPy (``cupy/_environment.py``, configured by ``cupy/.data/_wheel.json``): for NCCL,
  ``cuda-pathfinder``'s ``load_nvidia_dynamic_lib`` when installed (it searches the
  site-packages ``nvidia/nccl/lib`` first), else ``_get_nccl_from_wheel``, which loads
  ``nvidia/nccl/lib/libnccl.so.<major>`` of the installed ``nvidia-nccl-cu<cuda major>`` wheel
  when its version is at least the configured ``min_pypi_version``.

Everything else is predicted by the search order alone, and says so (``Resolution.basis``).
docs/native.md lists the sources and the limits.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.models import Environment, NativeLibrary

#: Package files that say what a package loads itself on import, relative to site-packages:
#: kept whole for the preload model (this module).
TORCH_INIT = "torch/__init__.py"
TORCH_VERSION = "torch/version.py"
CUPY_WHEEL_JSON = "cupy/.data/_wheel.json"
PRELOAD_SOURCES = (TORCH_INIT, TORCH_VERSION, CUPY_WHEEL_JSON)


@dataclass(frozen=True, slots=True)
class Preload:
    """One library a package loads itself when it is imported."""

    environment: str  # the site-packages directory
    package: str  # "torch", "cupy"
    path: str  # the file it loads
    soname: str  # what later consumers ask for
    source: str  # where the package says so ("torch/__init__.py _preload_cuda_deps")


def torch_cuda_libs(source: bytes) -> tuple[tuple[str, str], ...]:
    """``_preload_cuda_deps``'s ``(folder, glob)`` list, read from torch's ``__init__.py``
    (empty when the function or its list is not there)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_preload_cuda_deps":
            for stmt in ast.walk(node):
                value = getattr(stmt, "value", None)
                if isinstance(stmt, ast.AnnAssign | ast.Assign) and isinstance(value, ast.List):
                    out = []
                    for item in value.elts:
                        if (
                            isinstance(item, ast.Tuple)
                            and len(item.elts) == 2
                            and all(
                                isinstance(e, ast.Constant) and isinstance(e.value, str)
                                for e in item.elts
                            )
                        ):
                            folder, glob = (str(e.value) for e in item.elts)  # type: ignore[attr-defined]
                            out.append((folder, glob))
                    if out:
                        return tuple(out)
    return ()


_CUDA = re.compile(rb"^cuda\s*(?::\s*[^=]+)?=\s*['\"](\d+)\.", re.MULTILINE)


def torch_cuda_major(version_py: bytes | None) -> str | None:
    """``cuda = '13.0'`` in ``torch/version.py`` -> ``"13"`` (None for a CPU build)."""
    if version_py is None:
        return None
    m = _CUDA.search(version_py)
    return m.group(1).decode() if m else None


def _soname(path: str, libs: Mapping[str, NativeLibrary]) -> str:
    lib = libs.get(path)
    return (lib.soname if lib and lib.soname else None) or posixpath.basename(path)


def preloads(
    environments: Sequence[Environment],
    files: Mapping[str, bytes],
    libs: Sequence[NativeLibrary],
) -> tuple[Preload, ...]:
    """What importing torch or CuPy loads by path in each environment, in import order."""
    by_path = {lib.path: lib for lib in libs}
    out: list[Preload] = []
    for env in environments:
        site = env.real_path or env.path
        dists = env.by_name()
        init = files.get(posixpath.join(site, TORCH_INIT))
        if canonicalize_name("torch") in dists and init is not None:
            # only the environment's own files can match its globs
            inside = sorted(p for p in by_path if p.startswith(site.rstrip("/") + "/"))
            out += _torch(env.path, site, init, files, by_path, inside)
        cupy = [d for d in dists.values() if str(d.name).startswith("cupy")]
        wheel_json = files.get(posixpath.join(site, CUPY_WHEEL_JSON))
        if cupy and wheel_json is not None:
            out += _cupy(env, site, wheel_json, by_path)
    return tuple(out)


def _torch(
    env_path: str,
    site: str,
    init: bytes,
    files: Mapping[str, bytes],
    by_path: Mapping[str, NativeLibrary],
    paths: Sequence[str],
) -> list[Preload]:
    deps = by_path.get(posixpath.join(site, "torch/lib/libtorch_global_deps.so"))
    if deps is None or not any(n.startswith("libcudart.so") for n in deps.needed):
        return []  # a CPU build: _load_global_deps maps no CUDA runtime, nothing is preloaded
    major = torch_cuda_major(files.get(posixpath.join(site, TORCH_VERSION)))
    out = []
    for folder, glob in torch_cuda_libs(init):
        patterns = [posixpath.join(site, "nvidia", folder, "lib", glob)]
        if major is not None:
            patterns.append(posixpath.join(site, "nvidia", f"cu{major}", "lib", glob))
        patterns.append(posixpath.join(site, folder, "lib", glob))
        for pattern in patterns:
            # glob.glob gives directory order; one file matches in real wheels
            match = next((p for p in paths if fnmatch.fnmatchcase(p, pattern)), None)
            if match is not None:
                out.append(
                    Preload(
                        env_path,
                        "torch",
                        match,
                        _soname(match, by_path),
                        "torch/__init__.py _preload_cuda_deps",
                    )
                )
                break
    return out


def _cupy(
    env: Environment, site: str, wheel_json: bytes, by_path: Mapping[str, NativeLibrary]
) -> list[Preload]:
    try:
        config = json.loads(wheel_json)
        nccl = config["nccl"]
        cuda_major = str(config["cuda"]).split(".")[0]
        minimum = Version(str(nccl["min_pypi_version"]))
    except (ValueError, KeyError, TypeError, InvalidVersion):
        return []
    dists = env.by_name()
    wheel = dists.get(canonicalize_name(f"nvidia-nccl-cu{cuda_major}"))
    major = minimum.release[0]
    path = posixpath.join(site, "nvidia/nccl/lib", f"libnccl.so.{major}")
    if path not in by_path:
        return []
    if canonicalize_name("cuda-pathfinder") in dists:
        source = "cupy/_environment.py _preload_library (cuda-pathfinder, site-packages first)"
    elif (
        wheel is not None
        and wheel.version is not None
        and wheel.version.release[:1] == minimum.release[:1]
        and wheel.version >= minimum
    ):
        source = "cupy/_environment.py _get_nccl_from_wheel"
    else:
        return []
    return [Preload(env.path, "cupy", path, _soname(path, by_path), source)]
