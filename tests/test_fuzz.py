"""Fuzzing the parsers that take outside bytes, with hypothesis (issue 9).

Each target gets a bounded number of generated inputs per run (``EXAMPLES``, set with
``PINGUARD_FUZZ_EXAMPLES``, 1000 by default, about 20 s for the whole set on the CI machine;
derandomized so a CI run is reproducible, ``PINGUARD_FUZZ_RANDOM=1`` to explore) and may end only in
its documented error (``PinguardError`` and its subclasses: ``LayerError``, ``SourceError``,
``PolicyError``, ``InvalidDockerfile``) or a value. Anything else (``IndexError``,
``UnicodeDecodeError``, a ``RecursionError``...) is a crash and fails the test; an example
running longer than ``HANG_SECONDS`` is a hang (SIGALRM) and fails too. Inputs are built
from structure, not only noise: METADATA header lines, real tar headers from ``tarfile``
with bytes flipped, whiteout entries, manifest-shaped JSON, policy-shaped TOML and
Dockerfile instruction lines, so the fuzzer reaches past the first syntax check.
"""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinguard.audit.state import State
from pinguard.buildfile.dockerfile import parse as parse_dockerfile
from pinguard.catalog.interface import AnalyzerOptions
from pinguard.catalog.python import parse_distribution
from pinguard.catalog.registry import Analyzers
from pinguard.errors import PinguardError
from pinguard.layers.analysis import LayerLimits, analyze_stream
from pinguard.policy import parse_policy
from pinguard.sources.manifest import check_image_manifest, document_kind, parse_json_document

EXAMPLES = int(os.environ.get("PINGUARD_FUZZ_EXAMPLES", "1000"))
# PINGUARD_FUZZ_RANDOM=1 explores new inputs (with --hypothesis-seed); CI replays the same ones
RANDOM = os.environ.get("PINGUARD_FUZZ_RANDOM") == "1"
HANG_SECONDS = 5
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # hangs are caught by SIGALRM; the machine is shared, timings vary
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SITE = "/usr/lib/python3/dist-packages"
ANALYZERS = Analyzers.for_options(AnalyzerOptions())


class Hang(Exception):
    """An example ran past HANG_SECONDS."""


@contextmanager
def _alarm() -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Hang(f"example still running after {HANG_SECONDS} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _only_documented(call: Callable[[], object]) -> None:
    with _alarm(), suppress(PinguardError):
        call()


# --- METADATA / RECORD ---------------------------------------------------------------------------

_FIELDS = ["Metadata-Version", "Name", "Version", "Requires-Dist", "Requires-Python", "Summary"]
_header = st.tuples(
    st.sampled_from(_FIELDS) | st.text(max_size=12),
    st.text(max_size=40) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
).map(lambda kv: f"{kv[0]}: {kv[1]}")
_metadata = st.one_of(
    st.binary(max_size=400),
    st.lists(_header, max_size=10).map(lambda lines: "\n".join(lines).encode("utf-8", "replace")),
    st.lists(_header, max_size=10).map(lambda lines: "\n".join(lines).encode("latin-1", "replace")),
)
_record = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.tuples(st.text(max_size=30), st.text(max_size=20), st.text(max_size=5)), max_size=8
    ).map(lambda rows: "\n".join(",".join(r) for r in rows).encode()),
)


@FUZZ
@given(
    metadata=_metadata,
    record=_record,
    egg=st.booleans(),
    dirname=st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s),
)
def test_fuzz_metadata_and_record(metadata: bytes, record: bytes, egg: bool, dirname: str) -> None:
    meta_dir = f"{SITE}/{dirname}{'.egg-info' if egg else '.dist-info'}"
    files = {
        f"{meta_dir}/{'PKG-INFO' if egg else 'METADATA'}": metadata,
        f"{meta_dir}/RECORD": record,
        f"{meta_dir}/requires.txt": record,
        f"{meta_dir}/direct_url.json": metadata,
    }
    with _alarm():
        dist, problems = parse_distribution(meta_dir, files)  # never raises
    assert dist is not None or problems  # nothing vanishes silently


# --- the tar walk and whiteouts ------------------------------------------------------------------

_member = st.tuples(
    st.sampled_from(
        [
            "usr/lib/python3/dist-packages/a-1.dist-info/METADATA",
            "usr/lib/python3/dist-packages/a-1.dist-info/RECORD",
            "usr/lib/python3/dist-packages/.wh.a-1.dist-info",
            "usr/lib/python3/dist-packages/.wh..wh..opq",
            "usr/lib/python3/.wh.dist-packages",
            "usr/lib/python3.11/os.py",
            "var/lib/dpkg/status",
            ".wh.",
            "../etc/passwd",
        ]
    )
    | st.text(min_size=1, max_size=40),
    st.binary(max_size=200),
    st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE]),
)


def _tar(members: list[tuple[str, bytes, bytes]], fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = data[:50].decode("latin-1")
                tar.addfile(info)
    return buf.getvalue()


@st.composite
def _layer(draw: st.DrawFn) -> bytes:
    members = draw(st.lists(_member, max_size=6))
    fmt = draw(st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]))
    try:
        data = bytearray(_tar(members, fmt))
    except (ValueError, UnicodeEncodeError):  # a name ustar cannot hold
        data = bytearray(_tar(members, tarfile.PAX_FORMAT))
    for _ in range(draw(st.integers(0, 6))):  # flip bytes, mostly in the first headers
        if data:
            pos = draw(st.integers(0, min(len(data) - 1, 2047)))
            data[pos] = draw(st.integers(0, 255))
    cut = draw(st.none() | st.integers(0, len(data)))
    return bytes(data if cut is None else data[:cut])


def _walk_and_apply(layers: list[bytes]) -> None:
    state = State(ANALYZERS)
    for blob in layers:
        analysis = analyze_stream(
            io.BytesIO(blob),
            digest=None,
            size=None,
            select=ANALYZERS.selector(),
            open_stream=ANALYZERS.open_stream,
            prefetch=False,
            limits=LayerLimits(max_capture=4096, max_size=1 << 20),
        )
        state.apply(analysis)


@FUZZ
@given(layers=st.lists(_layer() | st.binary(max_size=1200), min_size=1, max_size=3))
def test_fuzz_tar_walk_and_whiteouts(layers: list[bytes]) -> None:
    _only_documented(lambda: _walk_and_apply(layers))


# --- manifests and indexes -----------------------------------------------------------------------

_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
_MEDIA = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.config.v1+json",
    "",
]
_descriptor = st.fixed_dictionaries(
    {},
    optional={
        "mediaType": st.sampled_from(_MEDIA) | _json,
        "digest": st.sampled_from(["sha256:" + "a" * 64, "sha256:../../x", "md5:00"]) | _json,
        "size": st.integers(-2, 1 << 40) | _json,
        "platform": _json,
    },
)
_document = st.fixed_dictionaries(
    {},
    optional={
        "schemaVersion": st.sampled_from([1, 2]) | _json,
        "mediaType": st.sampled_from(_MEDIA) | _json,
        "config": _descriptor | _json,
        "layers": st.lists(_descriptor, max_size=3) | _json,
        "manifests": st.lists(_descriptor, max_size=3) | _json,
        "artifactType": _json,
    },
)


@FUZZ
@given(
    doc=_document | _json,
    raw=st.binary(max_size=200),
    content_type=st.sampled_from(_MEDIA),
    descriptor_type=st.sampled_from(_MEDIA),
)
def test_fuzz_manifests_and_indexes(
    doc: Any, raw: bytes, content_type: str, descriptor_type: str
) -> None:
    def run() -> None:
        parsed = parse_json_document(json.dumps(doc).encode(), "fuzzed manifest")
        kind = document_kind(
            parsed, "fuzzed manifest", content_type=content_type, descriptor_type=descriptor_type
        )
        if kind == "manifest":
            check_image_manifest(parsed, "fuzzed manifest")

    _only_documented(run)
    _only_documented(lambda: parse_json_document(raw, "fuzzed bytes"))


# --- policy TOML ---------------------------------------------------------------------------------

_toml_line = st.one_of(
    st.sampled_from(
        [
            "[[pin]]",
            "[[forbid]]",
            "[rules.downgrade]",
            "[rules]",
            "[[waiver]]",
            'name = "numpy"',
            'spec = ">=1,<2"',
            'version = "==1.0"',
            'severity = "error"',
            "enabled = false",
            'platforms = ["linux/arm64"]',
            'extend = "other.toml"',
            "allow = [1, 2]",
        ]
    ),
    st.tuples(st.text(max_size=10), _json).map(lambda kv: f"{kv[0]} = {json.dumps(kv[1])}"),
    st.text(max_size=30),
)


@FUZZ
@given(lines=st.lists(_toml_line, max_size=10))
def test_fuzz_policy_toml(lines: list[str]) -> None:
    _only_documented(lambda: parse_policy("\n".join(lines)))


# --- Dockerfiles ---------------------------------------------------------------------------------

_docker_line = st.one_of(
    st.sampled_from(
        [
            "FROM python:3.12 AS base",
            "FROM base",
            "# syntax=docker/dockerfile:1",
            "# escape=`",
            "ARG V=1",
            "RUN pip install numpy==${V}",
            'RUN ["pip", "install", "x"]',
            "RUN <<EOF",
            "EOF",
            "COPY --from=base /a /b",
            "ENV A=1 B=${A:-2}",
            "RUN echo \\",
            "",
        ]
    ),
    st.text(max_size=40),
)


@FUZZ
@given(
    lines=st.lists(_docker_line, max_size=12),
    args=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
def test_fuzz_dockerfiles(lines: list[str], args: dict[str, str]) -> None:
    _only_documented(lambda: parse_dockerfile("\n".join(lines), build_args=args))


def test_a_duplicate_key_is_a_policy_error() -> None:
    """Found by the fuzzer: tomlkit raises KeyAlreadyPresent, not a ParseError."""
    import pytest

    from pinguard.policy.load import PolicyError

    with pytest.raises(PolicyError, match='invalid TOML: Key "name" already exists'):
        parse_policy('[[pin]]\nname = "numpy"\nname = "numpy"\n')
