"""Benchmark attestations: statement size, signing and verification, and the registry round trip.

Builds a synthetic judged audit of ``--distributions`` Python distributions over ``--steps``
build steps (the audit document is embedded whole in the predicate, so its size is what an
attestation weighs), signs it with a fresh ECDSA P-256 key (made by ``openssl``, as users
make theirs), and measures: building the statement, its canonical bytes and the envelope's,
signing, and checking (DSSE verify + statement parse + every verify check). Then it starts
Debian's ``docker-registry`` on 127.0.0.1 (the test suite's launcher), pushes a tiny image
with ``skopeo``, attaches ``--attestations`` envelopes one by one through the referrers tag
schema (each push is a read-modify-write of the ``sha256-<hex>`` index, so later pushes read
a longer index) and times the first and last push and a full ``find_attestations`` +
``verify`` over all of them. It prints a small table; ``--smoke`` runs a tiny case in seconds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.infra (the registry launcher, the layout builder)


def synthetic_result(distributions: int, steps: int) -> object:
    from packaging.utils import canonicalize_name

    from pinguard.models import (
        AuditResult,
        Change,
        ChangeKind,
        Distribution,
        Environment,
        ImageInfo,
        Platform,
        Snapshot,
        Step,
    )

    env = "/usr/local/lib/python3.11/site-packages"
    dists = tuple(
        Distribution(
            name=canonicalize_name(f"package-{i:05d}"),
            raw_version=f"{1 + i % 7}.{i % 13}.{i % 5}",
            metadata_path=f"{env}/package_{i:05d}-{1 + i % 7}.{i % 13}.{i % 5}.dist-info",
            requires_dist=(f"package-{(i + 1) % distributions:05d}>=1",),
            installer="pip",
        )
        for i in range(distributions)
    )
    per_step = max(1, distributions // max(1, steps))
    step_list = tuple(
        Step(
            index=s + 1,
            created_by=f"RUN pip install step-{s}",
            layer_digest=f"sha256:{s + 1:064x}",
            changes=tuple(
                Change(env, d.name, ChangeKind.ADDED, None, d.raw_version)
                for d in dists[s * per_step : (s + 1) * per_step]
            ),
        )
        for s in range(steps)
    )
    final = Snapshot(environments=(Environment(path=env, python="3.11", distributions=dists),))
    return AuditResult(
        image=ImageInfo(
            "docker://registry.example/bench:v1", "sha256:" + "ab" * 32, Platform("linux", "amd64")
        ),
        steps=step_list,
        final=final,
    )


def timed(fn: object, repeat: int = 1) -> tuple[float, object]:
    assert callable(fn)
    start = time.perf_counter()
    out = None
    for _ in range(repeat):
        out = fn()
    return (time.perf_counter() - start) / repeat, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distributions", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--attestations", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="a tiny case, a few seconds")
    args = parser.parse_args()
    if args.smoke:
        args.distributions, args.steps, args.attestations = 50, 3, 3

    from tests.infra.registry import build_oci_layout, start_registry

    from pinguard.attest.statement import PREDICATE_TYPE, build_statement, statement_bytes
    from pinguard.attest.store import find_attestations, push_attestation
    from pinguard.attest.verify import Demands, check_envelope, verify
    from pinguard.models import AuditResult, Severity
    from pinguard.signing import dsse
    from pinguard.signing.keys import load_private_key, load_public_key
    from pinguard.sources.interface import SourceOptions
    from pinguard.sources.registry import RegistrySource

    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="pinguard-attest-bench-") as tmp:
        work = Path(tmp)
        key_path, pub_path = work / "key.pem", work / "key.pub"
        subprocess.run(
            [
                "openssl",
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                str(key_path),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["openssl", "pkey", "-in", str(key_path), "-pubout", "-out", str(pub_path)],
            check=True,
            capture_output=True,
        )
        key, pub = load_private_key(key_path), load_public_key(pub_path)
        result = synthetic_result(args.distributions, args.steps)
        assert isinstance(result, AuditResult)
        now = _dt.datetime.now(tz=_dt.timezone.utc)

        def build() -> bytes:
            statement = build_statement(
                result, policies=(), fail_on=Severity.ERROR, allow_incomplete=False, now=now
            )
            return statement_bytes(statement)

        t_build, payload = timed(build, 3)
        assert isinstance(payload, bytes)
        t_sign, envelope = timed(lambda: dsse.sign(payload, key).to_json().encode(), 20)
        assert isinstance(envelope, bytes)
        demands = Demands(image_digest=result.image.manifest_digest or "")
        t_check, check = timed(
            lambda: check_envelope(envelope, pub, demands, now, source="bench", via="file"), 20
        )
        assert getattr(check, "ok", False), check
        rows += [
            (f"statement of {args.distributions} distributions", f"{len(payload) / 1024:.0f} KiB"),
            ("envelope", f"{len(envelope) / 1024:.0f} KiB"),
            ("build statement", f"{t_build * 1000:.1f} ms"),
            ("sign (PAE + ECDSA P-256)", f"{t_sign * 1000:.2f} ms"),
            ("check one envelope (verify + parse + checks)", f"{t_check * 1000:.2f} ms"),
        ]

        registry = start_registry(work / "registry")
        try:
            layout = build_oci_layout(work / "layout", layers=[{"etc/bench": b"bench\n"}])
            registry.push(layout.source, "bench/app:v1")
            ref = registry.ref("bench/app:v1")
            with RegistrySource(ref, SourceOptions()) as source:
                assert isinstance(source, RegistrySource)
                digest = source.resolve().manifest_digest or ""
                pushes = []
                for _ in range(args.attestations):
                    signed = dsse.sign(payload, key).to_json().encode()
                    t, _ = timed(
                        lambda signed=signed: push_attestation(
                            source, digest, signed, predicate_type=PREDICATE_TYPE, created="x"
                        )
                    )
                    pushes.append(t)
                t_find, candidates = timed(lambda: find_attestations(source, digest))
                assert isinstance(candidates, tuple)
                demands = Demands(image_digest=digest)
                t_verify, outcome = timed(lambda: verify(ref, candidates, pub, demands, now))
            checks = getattr(outcome, "checks", ())
            assert len(checks) == args.attestations
            rows += [
                ("push, first attestation (tag schema)", f"{pushes[0] * 1000:.0f} ms"),
                (f"push, attestation {args.attestations}", f"{pushes[-1] * 1000:.0f} ms"),
                (f"find {args.attestations} attestations", f"{t_find * 1000:.0f} ms"),
                (f"verify {args.attestations} attestations", f"{t_verify * 1000:.0f} ms"),
            ]
        finally:
            registry.stop()

    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
