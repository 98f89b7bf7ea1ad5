"""A warm audit of an ``oci:`` layout answered before parsing (``cli/warm.answer``).

Each case runs the real CLI in a fresh interpreter, as a CI job does, on a real OCI layout
whose two layers install and then downgrade a distribution (the default policy fails it). A
cold audit stores the result entry and the quick entry; the same command line again is
answered from them without argparse (the modules it imported tell), with the cold audit's
stdout, stderr, output file and exit code. Whatever the quick key or the files it names do
not cover makes it a miss, and then the full command runs: the image retagged to another
manifest, a manifest blob of other bytes, a policy file or a Dockerfile edited, a policy file
found where none was, another environment, the report beside the result entry altered. Each
miss gives what a ``--no-cache`` audit of the new state gives, never the stored report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pinguard.cache import key
from tests.factories import installed_dist
from tests.infra.registry import Layout, build_oci_layout

_RUN = """
import json, sys
from pinguard.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps({"code": code, "parsed": "argparse" in sys.modules}), file=sys.stderr)
"""


def _layout(path: Path, first: str, then: str) -> Layout:
    return build_oci_layout(path, tag="t", layers=[installed_dist(first), installed_dist(then)])


class Run:
    """One ``pinguard`` process: exit code, stdout, stderr less the probe's line, and
    whether it parsed its command line (the quick answer does not)."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        *lines, probe = proc.stderr.splitlines()
        got = json.loads(probe)
        self.code: int = got["code"]
        self.parsed: bool = got["parsed"]
        self.out = proc.stdout
        self.err = "\n".join(lines)

    def same(self, other: Run) -> bool:
        return (self.code, self.out, self.err) == (other.code, other.out, other.err)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The directory the audits run in (policy discovery looks there and above)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def _pinguard(work: Path, *argv: str, env: dict[str, str] | None = None) -> Run:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=work,
        env=env,
    )
    return Run(proc)


def _audit(work: Path, ref: str, cache: Path, *more: str, env: dict[str, str] | None = None) -> Run:
    return _pinguard(
        work, "audit", ref, "--format", "json", "--cache-dir", str(cache), *more, env=env
    )


def _stored(work: Path, ref: str, cache: Path, *more: str) -> Run:
    """A cold audit, and the check that the same command line is then answered before
    parsing (the case each miss below departs from)."""
    cold = _audit(work, ref, cache, *more)
    assert not _audit(work, ref, cache, *more).parsed
    return cold


def _missed(work: Path, ref: str, cache: Path, *more: str) -> Run:
    """The command line run again after a change the quick entry must not answer: parsed,
    and giving what a ``--no-cache`` audit of the new state gives."""
    run = _audit(work, ref, cache, *more)
    assert run.parsed
    assert run.same(_truth(work, ref, *more))
    return run


def _truth(work: Path, ref: str, *more: str) -> Run:
    return _pinguard(work, "audit", ref, "--format", "json", "--no-cache", *more)


def test_the_same_command_is_answered_before_parsing_with_the_cold_bytes(
    tmp_path: Path, work: Path
) -> None:
    layout = _layout(tmp_path / "layout", "2.0", "1.0")
    cache = tmp_path / "cache"
    cold = _audit(work, layout.source, cache)
    assert cold.parsed
    assert cold.code == 1  # the downgrade fails it
    assert len(list(cache.glob("quick-*.json"))) == 1
    warm = _audit(work, layout.source, cache)
    assert not warm.parsed
    assert warm.same(cold)
    assert warm.same(_truth(work, layout.source))

    # -o: the file written again, and the same line on stderr
    out = work / "reports" / "a.json"
    cold_o = _audit(work, layout.source, cache, "-o", str(out))
    written = out.read_bytes()
    out.unlink()
    warm_o = _audit(work, layout.source, cache, "-o", str(out))
    assert not warm_o.parsed
    assert warm_o.same(cold_o)
    assert out.read_bytes() == written == cold.out.encode()
    assert f"wrote the json report ({len(written)} bytes) to {out}" in warm_o.err


def test_a_layout_retagged_to_another_image_is_audited_again(tmp_path: Path, work: Path) -> None:
    layout = _layout(tmp_path / "layout", "2.0", "1.0")
    other = _layout(tmp_path / "other", "1.0", "2.0")  # an upgrade: passes
    cache = tmp_path / "cache"
    first = _stored(work, layout.source, cache)
    for blob in (other.path / "blobs" / "sha256").iterdir():
        shutil.copy(blob, layout.path / "blobs" / "sha256" / blob.name)
    shutil.copy(other.path / "index.json", layout.path / "index.json")  # :t is the other now
    again = _missed(work, layout.source, cache)
    assert again.code == 0 != first.code


def test_a_manifest_of_other_bytes_is_never_answered(tmp_path: Path, work: Path) -> None:
    layout = _layout(tmp_path / "layout", "2.0", "1.0")
    cache = tmp_path / "cache"
    _stored(work, layout.source, cache)
    digest = layout.images[0].manifest_digest.removeprefix("sha256:")
    manifest = layout.path / "blobs" / "sha256" / digest
    data = manifest.read_bytes()
    manifest.write_bytes(b" " + data[1:])  # same size, other bytes
    assert manifest.read_bytes() != data
    again = _missed(work, layout.source, cache)
    assert again.code == 3  # the blob is not its digest's: the image cannot be read
    assert "sha256:" + digest in again.err


def test_an_edited_policy_or_dockerfile_and_a_policy_found_are_misses(
    tmp_path: Path, work: Path
) -> None:
    layout = _layout(tmp_path / "layout", "2.0", "1.0")
    cache = tmp_path / "cache"
    policy = work / "p.toml"
    policy.write_text('[rules.downgrade]\nseverity = "error"\n')
    dockerfile = work / "Dockerfile"
    dockerfile.write_text("FROM scratch\nRUN pip install foo==2.0\n")
    more = ("--policy", str(policy), "--dockerfile", str(dockerfile))
    _stored(work, layout.source, cache, *more)

    policy.write_text('[rules.downgrade]\nseverity = "warning"\n')  # no longer fails it
    edited = _missed(work, layout.source, cache, *more)
    assert edited.code == 0
    assert not _audit(work, layout.source, cache, *more).parsed  # stored again

    dockerfile.write_text("FROM scratch\nRUN pip install foo==1.0\n")
    assert _audit(work, layout.source, cache, *more).parsed

    plain = _stored(work, layout.source, cache)
    (work / "pinguard.toml").write_text('[rules.downgrade]\nseverity = "warning"\n')
    found = _missed(work, layout.source, cache)
    assert found.code == 0 != plain.code


def test_another_environment_or_an_altered_report_is_a_miss(tmp_path: Path, work: Path) -> None:
    layout = _layout(tmp_path / "layout", "2.0", "1.0")
    cache = tmp_path / "cache"
    cold = _stored(work, layout.source, cache)
    env = {**os.environ, "PINGUARD_CACHE_URL": "file:///nowhere"}  # read by the fleet task
    assert _audit(work, layout.source, cache, env=env).parsed

    (report,) = cache.glob("result-*.bin")
    report.write_bytes(report.read_bytes().replace(b'"verdict": "fail"', b'"verdict": "pass"'))
    again = _audit(work, layout.source, cache)
    assert again.parsed  # not the report its entry names
    assert again.same(cold)


def test_any_write_to_a_package_file_changes_the_fingerprint(tmp_path: Path) -> None:
    """Content, size and modification time kept, the change time still moves."""
    package = tmp_path / "pkgprobe"
    package.mkdir()
    module = package / "mod.py"
    module.write_text("X = 1\n")
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        before = key.package_fingerprint("pkgprobe")
        assert key.package_fingerprint("pkgprobe") == before
        st = module.stat()
        module.write_text("X = 1\n")
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert module.stat().st_mtime_ns == st.st_mtime_ns
        assert key.package_fingerprint("pkgprobe") != before
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pkgprobe", None)
