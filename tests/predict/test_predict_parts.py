"""The prediction's parsers on their own: pip's requirements-file format as pip reads it, what
the build context holds where, .dockerignore, Debian's version strings, and which interpreter
a command word runs (PATH, virtual environments, Debian's python3). Each expected value is
what pip, docker or the shell does with the same input."""

from __future__ import annotations

from pathlib import Path

from packaging.utils import canonicalize_name

from pinguard.catalog.dpkg import packages
from pinguard.models import Distribution, Environment, Snapshot
from pinguard.predict.interpreters import find_interpreter, upstream_version, venv_seeds
from pinguard.predict.reqfiles import (
    ContextFiles,
    RequirementSet,
    ignored,
    python_metadata,
    read_requirements,
)


def _dist(env: str, name: str, version: str) -> Distribution:
    return Distribution(canonicalize_name(name), version, f"{env}/{name}-{version}.dist-info")


def test_a_requirements_file_read_as_pip_reads_it(tmp_path: Path) -> None:
    (tmp_path / "req").mkdir()
    (tmp_path / "req" / "base.txt").write_text(
        "# the stack\n"
        "torch==2.11.0  # pinned\n"
        "vllm>=0.11 \\\n"
        "    ; python_version >= '3.10'\n"
        "--extra-index-url ${EXTRA}\n"
        "-c pins.txt\n"
        "-r more.txt\n"
        "msgspec==0.19.0 --hash=sha256:abc\n"
        "#not a comment? yes it is\n"
        "foo @ https://example.invalid/foo-1.0-py3-none-any.whl#sha256=ab  # a comment\n"
    )
    (tmp_path / "req" / "pins.txt").write_text("nvidia-nccl-cu13==2.30.3\n")
    (tmp_path / "req" / "more.txt").write_text("--pre\nninja\n")
    files = ContextFiles().add("/src", tmp_path)
    found = RequirementSet()
    read_requirements("/src/req/base.txt", files, {"EXTRA": "https://x.invalid/simple"}, found)
    assert found.requirements == [
        "torch==2.11.0",
        "vllm>=0.11     ; python_version >= '3.10'",
        "ninja",
        "msgspec==0.19.0",
        "foo @ https://example.invalid/foo-1.0-py3-none-any.whl#sha256=ab",
    ]
    assert found.constraints == ["nvidia-nccl-cu13==2.30.3"]
    assert found.extra_index_urls == ["https://x.invalid/simple"]
    assert found.pre is True
    assert found.problems == []


def test_what_cannot_be_replayed_is_a_problem_never_a_guess(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("-e .\n./local/pkg\n-r /etc/missing.txt\n--config-file x\n")
    files = ContextFiles().add("/r.txt", tmp_path / "r.txt")
    found = RequirementSet()
    read_requirements("/r.txt", files, {}, found)
    assert found.problems == [
        "/r.txt: installs the editable . (a local source)",
        "/r.txt: './local/pkg' is a local path or not a requirement",
        "reads the requirements file /etc/missing.txt, whose content is not known: it is not "
        "copied from the build context (pinguard cannot see files the base image or a RUN "
        "made)",
        "/r.txt: option '--config-file x' is not modelled",
    ]
    changed = files.forget("/r.txt")
    again = RequirementSet()
    read_requirements("/r.txt", changed, {}, again)
    assert again.problems[0].endswith("an earlier RUN may have changed it")


def test_context_files_the_latest_copy_wins_and_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("first\n")
    (tmp_path / "y.txt").write_text("second\n")
    files = ContextFiles().add("/app", tmp_path / "a").add("/app/x.txt", tmp_path / "y.txt")
    assert files.read("/app/x.txt") == b"second\n"
    assert files.read("/app/../app/x.txt") == b"second\n"
    assert files.read("/app/nope.txt") is None
    assert files.add("/app/x.txt", b"heredoc\n").read("/app/x.txt") == b"heredoc\n"
    moved = dict(files.rebased("/app", "/opt/app"))
    assert moved == {"/opt/app": tmp_path / "a", "/opt/app/x.txt": tmp_path / "y.txt"}


def test_dockerignore_and_python_metadata_in_the_context(tmp_path: Path) -> None:
    (tmp_path / ".venv" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (tmp_path / "src" / "pkg.egg-info").mkdir(parents=True)
    patterns = [(False, ".venv"), (False, "*.log"), (True, "keep.log")]
    assert ignored(".venv/lib/python3.11", patterns)
    assert ignored("x.log", patterns)
    assert not ignored("keep.log", patterns)
    assert python_metadata(tmp_path, patterns, tmp_path) is None  # .venv left out
    assert python_metadata(tmp_path, [], tmp_path) == ".venv/lib/python3.11/site-packages"


def test_debian_versions_upstream() -> None:
    assert upstream_version("23.0.1+dfsg-1") == "23.0.1"
    assert upstream_version("66.1.1-1+deb12u2") == "66.1.1"
    assert upstream_version("1:3.11.2-6+deb12u8") == "3.11.2"
    assert upstream_version("not.a-version~x") is None


DEBIAN = Snapshot(
    environments=(
        Environment(
            "/usr/lib/python3/dist-packages",
            "3.11",
            (_dist("/usr/lib/python3/dist-packages", "pip", "23.0.1"),),
        ),
        Environment(
            "/opt/venv/lib/python3.11/site-packages",
            "3.11.2",
            (_dist("/opt/venv/lib/python3.11/site-packages", "filelock", "3.16.1"),),
        ),
    ),
    packages=packages(
        [
            ("python3.11", "3.11.2-6+deb12u8", "amd64"),
            ("python3-pip-whl", "23.0.1+dfsg-1", "all"),
            ("python3-setuptools-whl", "66.1.1-1+deb12u2", "all"),
        ],
        (("ID", "debian"), ("VERSION_ID", "12")),
    ),
)


def test_which_interpreter_a_word_runs() -> None:
    path = {"PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin"}
    pip, why = find_interpreter("pip", DEBIAN, {}, path, "/")
    # the venv has no pip: `pip` on PATH is Debian's, installing as root into /usr/local
    assert pip is not None, why
    assert pip.site == "/usr/local/lib/python3.11/dist-packages"
    python, _ = find_interpreter("python3", DEBIAN, {}, path, "/")
    assert python is not None
    assert python.site == "/opt/venv/lib/python3.11/site-packages"
    direct, why = find_interpreter("/opt/venv/bin/pip", DEBIAN, {}, path, "/")
    assert direct is None
    assert why == "/opt/venv/bin/pip does not exist: the Python at /opt/venv has no pip"
    relative, _ = find_interpreter("../bin/python", DEBIAN, {}, path, "/opt/venv/lib")
    assert relative is not None
    assert relative.prefix == "/opt/venv"
    nothing, why = find_interpreter("pip", Snapshot(), {}, path, "/")
    assert nothing is None
    assert why.startswith("no pip on PATH")


def test_ensurepip_seeds_from_dpkg() -> None:
    debian, _ = find_interpreter("python3", DEBIAN, {}, {"PATH": "/usr/bin"}, "/")
    assert debian is not None
    assert debian.python == "3.11.2"
    assert venv_seeds(debian, DEBIAN) == (("pip", "23.0.1"), ("setuptools", "66.1.1"))
    venv, _ = find_interpreter("python3", DEBIAN, {}, {"PATH": "/opt/venv/bin"}, "/")
    assert venv is not None
    assert venv_seeds(venv, DEBIAN) is None  # not Debian's: what ensurepip bundles is unknown
