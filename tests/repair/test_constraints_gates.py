"""`pinguard constraints` as a CI gate uses it (issue 28, "a user's first hour, round 2").

Everything is real: the README's demo image (`pinguard.testing.demo`, an OCI archive) and a
root filesystem written from the same layers, wheels built here and served by a package
index on 127.0.0.1 (some tagged manylinux, as torch and NCCL are on their real indexes), uv
resolving and installing, and the CLI run in-process. The checks are on exit codes, on what
stdout and stderr carry, and on the files left behind:

- `constraints check` reads a file by its content: pinguard's own lock under any name is
  checked, and a file it cannot read as constraints is an error (exit 2) naming it;
- `--verify` on a `dir:` source, or an image whose steps cannot be replayed, resolves the
  known-good set itself instead of passing having resolved nothing;
- a lock for an image without libc6 says which glibc it assumed and how to give the image's;
- a `dir:` source's platform is this host's, said in a note, or `--platform`;
- `-o` creates missing folders (and removes them again when the write fails), and the
  messages go to stderr.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomlkit

from pinguard.target import host_platform, platform_machine
from pinguard.testing.demo import Dist, Layer, build_demo, demo_layers, layer_files
from pinguard.testing.demo import write_oci_archive as write_archive
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer, serve_index
from tests.infra.wheels import WheelSpec, build_wheel, record_hash, wheel_bytes

TORCH_REQUIRES = ("nvidia-nccl-cu13>=2.30,<2.31", "nvidia-cutlass-dsl>=4.2")
#: The demo's known-good set (the state just before its nightly step), pip left out.
KNOWN_GOOD = {
    "numpy": "2.3.5",
    "nvidia-cutlass-dsl": "4.3.0",
    "nvidia-nccl-cu13": "2.30.3",
    "torch": "2.11.0+cu130",
}
FORBID_NCCL = (
    '[[forbidden]]\npackage = "nvidia-nccl-cu13"\nversion = "==2.30.3"\nreason = "hangs on GB10"\n'
)
PIN_NCCL = '[[pin]]\npackage = "nvidia-nccl-cu13"\nversion = ">=2.30,<2.31"\n'


def tagged_wheel(spec: WheelSpec, tag: str, out_dir: Path) -> Path:
    """``spec`` as a wheel tagged ``tag`` (``cp312-cp312-manylinux_2_28_x86_64``): the same
    payload and metadata as the py3-none-any build, with WHEEL and RECORD rewritten."""
    source = zipfile.ZipFile(io.BytesIO(wheel_bytes(spec)))
    entries: list[tuple[str, bytes]] = []
    for name in source.namelist():
        if name.endswith("/RECORD"):
            continue
        data = source.read(name)
        if name.endswith("/WHEEL"):
            data = (
                "Wheel-Version: 1.0\nGenerator: pinguard-tests\nRoot-Is-Purelib: false\n"
                f"Tag: {tag}\n"
            ).encode()
        entries.append((name, data))
    rows = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in entries)
    entries.append((f"{spec.dist_info}/RECORD", f"{rows}{spec.dist_info}/RECORD,,\n".encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.file_stem}-{spec.normalized_version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


@dataclass(frozen=True)
class Indexes:
    plain: IndexServer  # every known-good wheel py3-none-any: fits any glibc
    manylinux: IndexServer  # NCCL manylinux_2_18 and torch manylinux_2_28, as on their indexes
    partial: IndexServer  # no torch at all


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[Indexes]:
    plain, many, partial = tmp_path / "plain", tmp_path / "many", tmp_path / "partial"
    for name, version in KNOWN_GOOD.items():
        requires = TORCH_REQUIRES if name == "torch" else ()
        build_wheel(WheelSpec(name, version, requires), plain)
        if name != "torch":
            build_wheel(WheelSpec(name, version, requires), partial)
    build_wheel(WheelSpec("six", "1.16.0"), plain)
    build_wheel(WheelSpec("numpy", "2.3.5"), many)
    build_wheel(WheelSpec("nvidia-cutlass-dsl", "4.3.0"), many)
    tagged_wheel(WheelSpec("nvidia-nccl-cu13", "2.30.3"), "py3-none-manylinux_2_18_x86_64", many)
    # as on PyPI, the arm64 wheel too: a lock error for x86_64 lists only the wheels it could use
    tagged_wheel(WheelSpec("nvidia-nccl-cu13", "2.30.3"), "py3-none-manylinux_2_18_aarch64", many)
    tagged_wheel(
        WheelSpec("torch", "2.11.0+cu130", TORCH_REQUIRES),
        "cp312-cp312-manylinux_2_28_x86_64",
        many,
    )
    with (
        serve_index(plain) as a,
        serve_index(many) as b,
        serve_index(partial) as c,
    ):
        yield Indexes(a, b, c)


@pytest.fixture
def demo(tmp_path: Path) -> str:
    path = tmp_path / "glm-serving-demo.tar"
    build_demo(path, tag="2026-11-29")
    return f"oci-archive:{path}:2026-11-29"


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """The demo's known-good state as a directory: its first three layers' files."""
    root = tmp_path / "rootfs"
    for layer in demo_layers()[:3]:
        files, _whiteouts = layer_files(layer)
        for rel, data in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return root


def _line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln == text)


# --------------------------------------------------------------------------- check


def test_check_reads_pinguards_own_lock_under_any_name(
    demo: str, indexes: Indexes, tmp_path: Path
) -> None:
    """The lock `constraints -f pylock` wrote is checked as a lock under every name a user
    gives it (`locks.toml` passed the gate with exit 0 and no output): the forbidden NCCL is
    found on its line, exit 1; a policy it satisfies gives exit 0 on the same files."""
    written = tmp_path / "pylock.toml"
    code, out, err = cli_streams(
        "constraints", demo, "--no-cache", "-f", "pylock", "-o", str(written),
        "--index-url", indexes.plain.url, "--policy", "none",
    )  # fmt: skip
    assert code == 0, err
    forbid, pin = tmp_path / "forbid.toml", tmp_path / "pin.toml"
    forbid.write_text(FORBID_NCCL)
    pin.write_text(PIN_NCCL)
    names = ["locks.toml", "pylock.x.toml", "glm.lock", "known-good", "pylock.toml"]
    for name in names:
        path = tmp_path / "gate" / name
        path.parent.mkdir(exist_ok=True)
        shutil.copy(written, path)
        line = _line_of(path, 'name = "nvidia-nccl-cu13"')
        code, out, err = cli_streams("constraints", "check", str(path), "--policy", str(forbid))
        assert (code, err) == (1, ""), (name, out, err)
        assert out == (
            f"{path}:{line}: nvidia-nccl-cu13==2.30.3: nvidia-nccl-cu13 2.30.3 is forbidden: "
            "hangs on GB10\n"
        ), name
        assert cli_streams("constraints", "check", str(path), "--policy", str(pin)) == (0, "", "")


def test_check_refuses_a_file_it_cannot_read_as_constraints(tmp_path: Path) -> None:
    """Each file that is no constraints text, pyproject table or lock, or that holds nothing
    to check, or is missing, is exit 2 with one error line naming it, never a silent pass;
    the other files of the run are still checked and reported."""
    policy = tmp_path / "forbid.toml"
    policy.write_text(FORBID_NCCL)
    bad = tmp_path / "bad.txt"
    bad.write_text("nvidia-nccl-cu13==2.30.3\n")
    cases: dict[str, bytes | None] = {
        "empty.txt": b"",
        "comments.txt": b"# nothing pinned yet\n\n",
        "notes.txt": b"The constraints live in the other folder.\nAsk the platform team.\n",
        "pyproject.toml": b'[project]\nname = "app"\n[tool.black]\nline-length = 99\n',
        "pylock.empty.toml": b'lock-version = "1.0"\npackages = []\n',
        "image.png": b"\x89PNG\r\n\x1a\n\x00\xff\xfe",
        "includes.txt": b"-r base.txt\n-c ../constraints/glm.txt\n",
        "broken.toml": b"[[packages]\nname = 'x'\n",
        "missing.txt": None,
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        code, out, err = cli_streams(
            "constraints", "check", str(bad), str(path), "--policy", str(policy)
        )
        assert code == 2, (name, out, err)
        assert out.startswith(f"{bad}:1: nvidia-nccl-cu13==2.30.3: "), name  # still checked
        lines = err.splitlines()
        assert len(lines) == 1, (name, err)
        assert lines[0].startswith("pinguard: error: "), (name, err)
        assert f"{str(path)!r}" in lines[0], (name, err)
    folder = tmp_path / "constraints"
    folder.mkdir()
    code, _, err = cli_streams("constraints", "check", str(folder), "--policy", str(policy))
    assert code == 2
    assert f"pinguard: error: cannot read {str(folder)!r}: Is a directory" in err
    readme = tmp_path / "README.md"
    readme.write_text("# constraints\n")
    code, _, err = cli_streams("constraints", "check", str(readme), "--policy", str(policy))
    assert code == 2
    assert "nothing to check: every file given is documentation" in err


def test_check_reads_a_constraints_text_and_a_uv_table_by_content(tmp_path: Path) -> None:
    """A pip constraints text is read as one whatever it is called, and so is a [tool.uv]
    table in a file with neither pyproject's name nor .toml (it was read as a requirements
    text: four "not a requirement" problems, the forbidden pin unseen)."""
    policy = tmp_path / "forbid.toml"
    policy.write_text(FORBID_NCCL)
    text = tmp_path / "glm.constraints"
    text.write_text("# pins\ntorch==2.11.0+cu130\nnvidia-nccl-cu13==2.30.3  # known good\n")
    table = tmp_path / "uv.constraints"
    table.write_text('[tool.uv]\nconstraint-dependencies = [\n  "nvidia-nccl-cu13==2.30.3",\n]\n')
    code, out, err = cli_streams(
        "constraints", "check", str(text), str(table), "--policy", str(policy)
    )
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"{text}:3: nvidia-nccl-cu13==2.30.3: nvidia-nccl-cu13 2.30.3 is forbidden: hangs on GB10",
        f"{table}:3: nvidia-nccl-cu13==2.30.3: nvidia-nccl-cu13 2.30.3 is forbidden: hangs on GB10",
    ]


# --------------------------------------------------------------------------- --verify


def test_verify_on_a_dir_source_resolves_the_known_good_set(
    rootfs: Path, indexes: Indexes, tmp_path: Path
) -> None:
    """A directory has no history to replay: --verify resolves the known-good set itself with
    uv (exit 0 where the index has it), and fails (exit 1, uv's words) where the index lacks
    torch 2.11.0+cu130, instead of exiting 0 having resolved nothing."""
    out_file = tmp_path / "c.txt"
    ref = f"dir:{rootfs}"
    args = ("constraints", ref, "--no-cache", "--platform", "linux/amd64", "-o", str(out_file))
    code, out, err = cli_streams(*args, "--verify", "--index-url", indexes.plain.url)
    assert code == 0, err
    assert out == ""
    assert (
        f"verify: no install step of {ref} to replay (a directory has no build history); "
        "resolving the known-good set itself instead"
    ) in err.splitlines()
    assert (
        "known-good set (4 pins) for CPython 3.12 on x86_64-unknown-linux-gnu: satisfiable (uv)"
    ) in err.splitlines()
    code, out, err = cli_streams(*args, "--verify", "--index-url", indexes.partial.url)
    assert code == 1, err
    assert (
        "known-good set (4 pins) for CPython 3.12 on x86_64-unknown-linux-gnu: UNSATISFIABLE (uv)"
    ) in err.splitlines()
    assert "torch==2.11.0+cu130" in err.split("UNSATISFIABLE (uv)", 1)[1]


def test_verify_says_what_it_could_not_replay_and_still_verifies(
    indexes: Indexes, tmp_path: Path
) -> None:
    """An image whose only install step reads `-r requirements.txt` (not in the history):
    the step is named as not replayed, and the known-good set is resolved instead."""
    archive = tmp_path / "img.tar"
    write_archive(
        [
            Layer("ADD rootfs /", add=[Dist("pip", "25.0")]),
            Layer("RUN /bin/sh -c pip install -r requirements.txt", add=[Dist("six", "1.16.0")]),
        ],
        archive,
        tag="t",
    )
    ref = f"oci-archive:{archive}:t"
    code, _, err = cli_streams(
        "constraints", ref, "--no-cache", "-o", str(tmp_path / "c.txt"), "--verify",
        "--index-url", indexes.plain.url,
    )  # fmt: skip
    assert code == 0, err
    lines = err.splitlines()
    assert "step 2: not replayed: -r requirements.txt (cannot be read outside the image)" in lines
    assert (
        f"verify: no install step of {ref} to replay (no pip or uv install step in its history "
        "names a requirement); resolving the known-good set itself instead"
    ) in lines
    assert any(ln.startswith("known-good set (1 pins) ") and "satisfiable" in ln for ln in lines)


# --------------------------------------------------------------------------- pylock targets


def test_a_lock_for_an_image_without_libc6_says_what_glibc_it_assumed(
    demo: str, indexes: Indexes, tmp_path: Path
) -> None:
    """The README's demo has no libc6: against an index whose torch is manylinux_2_28 and
    NCCL manylinux_2_18, the error says glibc 2.17 was assumed and why, shows the wheels the
    index has and the glibc they need, and names --glibc 2.28; with --glibc 2.28 the lock is
    written, names its glibc, and uv installs it for that target (CPython 3.12 from this
    host's Python, whatever its version)."""
    path = tmp_path / "pylock.toml"
    base = ("constraints", demo, "--no-cache", "-f", "pylock", "-o", str(path))
    code, out, err = cli_streams(*base, "--index-url", indexes.manylinux.url)
    assert code == 2, err
    assert not path.exists()
    assert (
        "pinguard: error: cannot lock 2 of 4 packages for CPython 3.12 on linux/amd64 with glibc "
        "2.17 (assumed: the image has no libc6 package) from "
    ) in err
    assert (
        "torch==2.11.0+cu130: no wheel for this target on the index (it has 2.11.0+cu130); its "
        "wheels need glibc 2.28 or newer: torch-2.11.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    ) in err
    assert (
        "nvidia-nccl-cu13==2.30.3: no wheel for this target on the index (it has 2.30.3); its "
        "wheels need glibc 2.18 or newer: nvidia_nccl_cu13-2.30.3-py3-none-manylinux_2_18_x86_64"
        ".whl\n"
    ) in err  # the aarch64 wheel beside it is no wheel this target could use: not listed
    assert err.rstrip().endswith(
        "if the image's glibc is 2.28 or newer (`ldd --version` in the image), "
        "give it with --glibc 2.28"
    )
    code, out, err = cli_streams(
        *base, "--index-url", indexes.manylinux.url, "--glibc", "2.28", "--verify"
    )
    assert code == 0, err
    assert out == ""
    assert (
        "verify: uv installed all 4 locked packages at their locked versions "
        "(CPython 3.12, x86_64-manylinux_2_28)"
    ) in err.splitlines()
    text = path.read_text()
    assert "# glibc: 2.28 (given with --glibc)" in text.splitlines()
    doc = tomlkit.parse(text).unwrap()
    assert {p["name"]: p["version"] for p in doc["packages"]} == KNOWN_GOOD
    torch = next(p for p in doc["packages"] if p["name"] == "torch")
    assert [w["name"] for w in torch["wheels"]] == [
        "torch-2.11.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    ]


def test_a_lock_reads_the_glibc_of_an_image_with_libc6(indexes: Indexes, tmp_path: Path) -> None:
    """With a dpkg database holding libc6 2.36, no --glibc is needed: the lock takes the
    manylinux_2_28 torch, says where its glibc came from, and uv verifies it for
    x86_64-manylinux_2_36."""
    status = (
        b"Package: libc6\nStatus: install ok installed\nArchitecture: amd64\n"
        b"Version: 2.36-9+deb12u4\n\n"
    )
    layers = demo_layers()
    layers[0] = Layer(
        layers[0].created_by,
        add=layers[0].add,
        files={**layers[0].files, "var/lib/dpkg/status": status},
    )
    archive = tmp_path / "debian.tar"
    write_archive(layers, archive, tag="t")
    path = tmp_path / "pylock.toml"
    code, _, err = cli_streams(
        "constraints", f"oci-archive:{archive}:t", "--no-cache", "-f", "pylock", "-o", str(path),
        "--index-url", indexes.manylinux.url, "--verify",
    )  # fmt: skip
    assert code == 0, err
    assert "glibc is unknown" not in err
    assert "# glibc: 2.36 (the image's libc6 2.36-9+deb12u4)" in path.read_text().splitlines()
    assert (
        "verify: uv installed all 4 locked packages at their locked versions "
        "(CPython 3.12, x86_64-manylinux_2_36)"
    ) in err.splitlines()


def test_a_lock_of_a_dir_source_is_for_the_host_platform_or_the_given_one(
    rootfs: Path, indexes: Indexes, tmp_path: Path
) -> None:
    """A directory names no platform: the lock is for this host's, with a note saying so
    ("the image platform is None" before); --platform chooses another, without the note."""
    ref = f"dir:{rootfs}"
    path = tmp_path / "pylock.toml"
    args = ("constraints", ref, "--no-cache", "-f", "pylock", "-o", str(path), "--index-url")
    code, _, err = cli_streams(*args, indexes.plain.url)
    assert code == 0, err
    host = host_platform()
    assert (
        f"note: {ref} names no platform (a directory has none): taking this host's, {host} "
        "(--platform os/arch to choose)"
    ) in err.splitlines()
    marker = tomlkit.parse(path.read_text()).unwrap()["environments"][0]
    assert f'platform_machine == "{platform_machine(host)}"' in marker
    code, _, err = cli_streams(*args, indexes.plain.url, "--platform", "linux/arm64")
    assert code == 0, err
    assert "names no platform" not in err
    marker = tomlkit.parse(path.read_text()).unwrap()["environments"][0]
    assert 'platform_machine == "aarch64"' in marker


# --------------------------------------------------------------------------- -o and streams


def test_output_folders_are_created_and_messages_go_to_stderr(
    demo: str, indexes: Indexes, tmp_path: Path
) -> None:
    """`-o constraints/NAME.txt` in a fresh checkout works for constraints, a lock and an
    audit report, as trivy's -o does; what was written where, and the known-good state, go
    to stderr, so stdout stays empty (and `-f uv` says what it wrote on stderr too)."""
    target = tmp_path / "checkout" / "constraints" / "glm.txt"
    code, out, err = cli_streams("constraints", demo, "--no-cache", "-o", str(target))
    assert (code, out) == (0, "")
    assert err.splitlines() == [
        f"wrote 4 constraints to {target}",
        "known-good state: just before step 6 (the first step with error findings)",
    ]
    assert "nvidia-nccl-cu13==2.30.3" in target.read_text().splitlines()
    lock = tmp_path / "checkout" / "locks" / "pylock.glm.toml"
    code, out, err = cli_streams(
        "constraints", demo, "--no-cache", "-f", "pylock", "-o", str(lock),
        "--index-url", indexes.plain.url,
    )  # fmt: skip
    assert (code, out) == (0, ""), err
    assert f"wrote 4 locked packages to {lock}" in err.splitlines()
    report = tmp_path / "checkout" / "reports" / "2026" / "audit.json"
    code, out, err = cli_streams("audit", demo, "--no-cache", "-f", "json", "-o", str(report))
    assert (code, out) == (1, "")  # the demo's downgrade
    assert f"wrote the json report ({report.stat().st_size} bytes) to {report}" in err
    pyproject = tmp_path / "checkout" / "pyproject.toml"
    pyproject.write_text('[project]\nname = "app"\n')
    code, out, err = cli_streams(
        "constraints", demo, "--no-cache", "-f", "uv", "--pyproject", str(pyproject)
    )
    assert (code, out) == (0, "")
    assert f"wrote [tool.uv] constraint-dependencies (4 pins) to {pyproject}" in err.splitlines()


_LIMITED = """
import resource, signal, sys
from pinguard.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sys.exit(main(sys.argv[1:]))
"""


def test_a_failed_write_leaves_no_folder_it_made(demo: str, tmp_path: Path) -> None:
    """A report that cannot be written (a file size limit, as on a full disk) into folders
    -o had to create: exit 2 naming the file and the cause, and the folders are gone again."""
    report = tmp_path / "new" / "deeper" / "report.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-c", _LIMITED, "audit", demo),
            *("--no-cache", "--format", "json", "-o", str(report)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"pinguard: error: cannot write {str(report)!r}: File too large" in proc.stderr
    assert not (tmp_path / "new").exists()
