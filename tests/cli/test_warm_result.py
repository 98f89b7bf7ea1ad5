"""A warm audit answered from its result entry (``cli/warm.py``) gives the cold audit's bytes.

Each case audits the demo archive with the real CLI in this process, from a directory of its
own (so policy discovery sees only what the test writes there): cold with ``--no-cache``,
cold with a cache directory, then warm from that cache, and compares stdout byte for byte
and the exit codes. What the key does not cover is checked on a hit (the policy files' digests,
the date window of the waivers), and what it covers is shown to miss: a policy edit, an edit
of a file the policy extends, another format, an entry altered on disk. Commands the entry
cannot answer (a lazy read, ``--no-cache``, the table on stdout) write none.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pytest

from pinguard.cache.key import RESULT_FORMAT
from pinguard.cli import main, warm
from pinguard.policy.load import load_policy
from pinguard.testing.demo import build_demo


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "demo.tar"
    build_demo(path, tag="t")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return f"oci-archive:{path}:t"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out


def _results(cache: Path) -> list[Path]:
    return sorted(cache.glob("result-*.json"))


@pytest.mark.parametrize("fmt", ["json", "sarif", "markdown", "cyclonedx"])
def test_warm_gives_the_cold_bytes_and_exit_code(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    cache = tmp_path / "cache"
    reference = _run(capsys, "audit", demo, "--format", fmt, "--no-cache")
    cold = _run(capsys, "audit", demo, "--format", fmt, "--cache-dir", str(cache))
    assert len(_results(cache)) == 1
    warm_run = _run(capsys, "audit", demo, "--format", fmt, "--cache-dir", str(cache))
    assert reference == cold == warm_run
    assert reference[0] == 1  # the demo's downgrades fail it: the exit code is kept too
    assert len(_results(cache)) == 1  # answered, not written again


def test_warm_writes_the_output_file_as_the_cold_audit_did(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    args = ["audit", demo, "--format", "html", "--cache-dir", str(cache), "-o", "r.html"]
    assert main(args) == 1
    cold = Path("r.html").read_bytes()
    _, cold_err = capsys.readouterr()
    Path("r.html").unlink()
    assert main(args) == 1
    _, warm_err = capsys.readouterr()
    assert Path("r.html").read_bytes() == cold
    assert warm_err == cold_err  # "wrote the html report (N bytes) to r.html"


def test_an_edited_policy_file_is_a_miss(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The discovered pinguard.toml is judged again when its bytes change, and so is a file
    it extends: the warm report is then the cold report of the new policy."""
    cache = tmp_path / "cache"
    Path("base.toml").write_text('[rules.downgrade]\nseverity = "error"\n')
    Path("pinguard.toml").write_text('extend = ["base.toml"]\n')
    argv = ["audit", demo, "--format", "json", "--cache-dir", str(cache)]
    first = _run(capsys, *argv)
    assert first[0] == 1
    assert _run(capsys, *argv) == first

    Path("base.toml").write_text('[rules.downgrade]\nseverity = "warning"\n')
    edited = _run(capsys, *argv)
    assert edited[0] == 0  # downgrades are warnings now: the extended file was read again
    assert edited == _run(capsys, *argv[:-2], "--no-cache")
    assert _run(capsys, *argv) == edited

    Path("pinguard.toml").write_text('extend = ["base.toml"]\n[rules.downgrade]\nenabled = false\n')
    disabled = _run(capsys, *argv)
    assert disabled != edited
    assert disabled == _run(capsys, *argv[:-2], "--no-cache")
    Path("pinguard.toml").unlink()
    default = _run(capsys, *argv)  # none found: the built-in default
    assert default == _run(capsys, *argv[:-2], "--no-cache")
    assert default != first
    Path("pinguard.toml").write_text('extend = ["base.toml"]\n')
    Path("base.toml").write_text('[rules.downgrade]\nseverity = "error"\n')
    assert _run(capsys, *argv) == first  # as at first: the first entry answers again


def test_another_format_or_option_is_another_entry(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    argv = ["audit", demo, "--cache-dir", str(cache)]
    json_out = _run(capsys, *argv, "--format", "json")
    fail_on = _run(capsys, *argv, "--format", "json", "--fail-on", "never")
    assert json_out[0] == 1
    assert fail_on[0] == 0
    assert len(_results(cache)) == 2
    assert _run(capsys, *argv, "--format", "json", "--fail-on", "never") == fail_on
    assert _run(capsys, *argv, "--format", "json") == json_out


def test_an_altered_entry_is_a_miss(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    argv = ["audit", demo, "--format", "json", "--cache-dir", str(cache)]
    cold = _run(capsys, *argv)
    (entry,) = _results(cache)
    data = entry.read_bytes()
    altered = data.replace(b'"exit":1', b'"exit":0', 1)  # a pass, where it failed
    assert altered != data
    entry.write_bytes(altered)
    assert _run(capsys, *argv) == cold  # the seal fails: audited again (from the replay)
    assert entry.read_bytes() == data  # ... and the entry written again
    report = entry.with_suffix(".bin")  # the report beside it, which the entry names
    kept = report.read_bytes()
    forged = kept.replace(b"nvidia-nccl-cu13", b"nvidia-nccl-cu99", 1)
    assert forged != kept
    report.write_bytes(forged)
    assert _run(capsys, *argv) == cold  # not the report the entry names: audited again
    assert report.read_bytes() == kept


def test_commands_the_entry_cannot_answer_write_none(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    _run(capsys, "audit", demo, "--cache-dir", str(cache))  # the table on stdout
    _run(capsys, "audit", demo, "--format", "json", "--cache-dir", str(cache), "--no-cache")
    _run(
        capsys, "audit", demo, "--format", "json", "--cache-dir", str(cache), "--layer-read", "lazy"
    )
    assert _results(cache) == []


def test_a_bad_policy_is_still_named_before_a_missing_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("bad.toml").write_text("[rules.downgrade]\nseverity = 3\n")
    code = main(["audit", "oci-archive:missing.tar", "--format", "json", "--policy", "bad.toml"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "bad.toml" in err


def _waivers(*expires: str) -> str:
    return "".join(
        f'[[waiver]]\npackage = "p{i}"\nrule = "downgrade"\nreason = "r"\nexpires = {day}\n'
        for i, day in enumerate(expires)
    )


def test_the_window_is_where_no_waiver_changes_state(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(_waivers("2026-12-01", "2026-12-10", "2026-12-20"))
    policy = load_policy(path)
    today = _dt.date(2026, 12, 4)
    assert warm._window(policy, today) == ("2026-12-02", "2026-12-10")
    digest = policy.source.files[0][1]
    entry = {
        "format": RESULT_FORMAT,
        "exit": 0,
        "policy": [[str(path), digest]],
        "valid": list(warm._window(policy, today)),
    }
    days = {d: warm._holds(entry, _dt.date(2026, 12, d)) for d in (1, 2, 10, 11)}
    assert days == {1: False, 2: True, 10: True, 11: False}
    assert warm._window(load_policy(), today) == ("", "")  # no waivers: no end
    path.write_text(path.read_text() + "\n")
    assert not warm._holds(entry, today)  # the file judged by changed


def test_the_entry_names_its_policy_files(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    Path("pinguard.toml").write_text('[rules.downgrade]\nseverity = "error"\n')
    _run(capsys, "audit", demo, "--format", "json", "--cache-dir", str(cache))
    (entry,) = _results(cache)
    stored = json.loads(entry.read_text())
    assert [Path(f).name for f, _ in stored["policy"]] == ["pinguard.toml"]
    assert stored["valid"] == ["", ""]


def test_the_parser_offers_every_format() -> None:
    """``cli/audit.py`` names the formats so that building the parser loads no report."""
    from pinguard.cli.audit import FORMAT_NAMES
    from pinguard.report.formats import FORMATS

    assert tuple(FORMATS) == FORMAT_NAMES


def test_the_sbom_formats_are_the_writers_of_the_extra() -> None:
    """``cli/audit.py`` checks the sbom extra only for these, so a warm JSON audit loads no
    report module: they are the formats ``report.formats`` says the extra writes."""
    from pinguard.cli.audit import SBOM_FORMAT_NAMES
    from pinguard.report.formats import SBOM_WRITERS

    assert set(SBOM_WRITERS) == set(SBOM_FORMAT_NAMES)
