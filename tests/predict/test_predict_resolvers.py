"""Where pip's resolver and uv's can disagree: each case built for real, beside the prediction.

The prediction answers every install with uv (``plan``'s dry run) and, for pip steps, asks
pip's own resolver the same question. Each case below is a step of a real ``buildah bud``
over the tests' Debian base, whose pip (23.0.1) is the truth; each test states what that pip
did (the built image's audit, or the build's failure) and what the prediction said
(docs/predict.md has the same list):

- ``-U`` (``--upgrade-strategy only-if-needed``): pip upgrades only what the step names; the
  prediction too (``--upgrade-package``; uv's own ``--upgrade`` is eager).
- ``-U --upgrade-strategy eager``: pip upgrades the dependencies too; the prediction too.
- ``--pre``: pip takes the release candidate; the prediction too (``--prerelease allow``).
- no ``--pre`` and a newer pre-release on the index: both keep to the final release.
- ``--extra-index-url`` with a newer version there: pip takes it; the prediction too
  (``unsafe-best-match``).
- one version on both indexes, different files: pip takes the extra index's file (a later
  ``--force-reinstall`` from the main index is a real reinstall); the prediction too (of equal
  files the last index's, as pip's resolver walks its candidates from the end).
- backtracking order (``top`` requires ``yy`` then ``xx``, which pin ``zz`` differently): pip
  installs ``xx 2.0, yy 1.0, zz 1.0`` (it ranks the two by name), uv ``xx 1.0, yy 2.0, zz
  2.0`` (the order written); pip's resolver, asked, disagrees: the step is unpredicted, both
  answers named.
- only a pre-release fits a dependency (``ccc>=1.5`` with ``1.0`` and ``2.0b1``): pip 23.0.1
  fails the build (pips up to 25.3 do; 26.0 takes ``2.0b1``, as uv does); the prediction says
  from the image's pip version that pip would fail the step (unpredicted).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.build import build_image, remove_image
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer, serve_index
from tests.infra.wheels import WheelSpec, build_wheels

pytestmark = pytest.mark.integration

W = WheelSpec
MAIN = (
    # -U only-if-needed and eager
    W("aaa", "1.0", ("bbb",)),
    W("aaa", "2.0", ("bbb",)),
    W("bbb", "1.0"),
    W("bbb", "2.0"),
    W("eaa", "1.0", ("ebb",)),
    W("eaa", "2.0", ("ebb",)),
    W("ebb", "1.0"),
    W("ebb", "2.0"),
    # pre-releases
    W("fff", "1.0"),
    W("fff", "1.1rc1"),
    W("ggg", "1.0"),
    W("ggg", "1.1rc1"),
    W("ccc", "1.0"),
    W("ccc", "2.0b1"),
    W("eee", "1.0", ("ccc>=1.5",)),
    # index order
    W("hhh", "1.0"),
    W("iii", "1.0", files={"iii/__init__.py": b"# from the main index\n"}),
    # backtracking order
    W("top", "1.0", ("yy", "xx")),
    W("xx", "2.0", ("zz==1.0",)),
    W("xx", "1.0", ("zz==2.0",)),
    W("yy", "2.0", ("zz==2.0",)),
    W("yy", "1.0", ("zz==1.0",)),
    W("zz", "1.0"),
    W("zz", "2.0"),
)
EXTRA = (
    W("hhh", "2.0"),
    W("iii", "1.0", files={"iii/__init__.py": b"# from the extra index\n"}),
)
PIP = "pip install --index-url $INDEX_URL"
STEPS = {
    "upgrade-setup": f"RUN {PIP} aaa==1.0 bbb==1.0 eaa==1.0 ebb==1.0",
    "upgrade": f"RUN {PIP} -U aaa",
    "upgrade-eager": f"RUN {PIP} -U --upgrade-strategy eager eaa",
    "pre": f"RUN {PIP} --pre fff",
    "no-pre": f"RUN {PIP} ggg",
    "extra-newer": f"RUN {PIP} --extra-index-url $EXTRA_URL hhh",
    "extra-tie": f"RUN {PIP} --extra-index-url $EXTRA_URL iii==1.0",
    "extra-tie-reinstall": f"RUN {PIP} --force-reinstall --no-deps iii==1.0",
    "backtracking": f"RUN {PIP} top",
}
FAILING = {"prerelease-only": f"RUN {PIP} eee"}
HEAD = "FROM {base}\nARG INDEX_URL\nARG EXTRA_URL\n"
SITE = "/usr/local/lib/python3.11/dist-packages"


@dataclass(frozen=True)
class Case:
    """A step's built audit (None when the build failed there) and its prediction."""

    built: dict[str, Any] | None
    predicted: dict[str, Any]

    @staticmethod
    def moves(step: dict[str, Any]) -> dict[str, tuple[str, str | None, str | None]]:
        return {c["name"]: (c["kind"], c["before"], c["after"]) for c in step["changes"]}


@dataclass(frozen=True)
class Built:
    cases: dict[str, Case]
    log: str


def _dockerfile(base: str, steps: dict[str, str]) -> str:
    return HEAD.format(base=base) + "".join(f"{line}\n" for line in steps.values())


def _json(result: tuple[int, str, str]) -> dict[str, Any]:
    _, out, err = result
    assert out.startswith("{"), err
    doc: dict[str, Any] = json.loads(out)
    return doc


def _run(
    base: str, steps: dict[str, str], tag: str, urls: dict[str, str], tmp: Path, build_ok: bool
) -> Built:
    context = tmp / tag.rsplit(":", 1)[1]
    context.mkdir()
    text = _dockerfile(base, steps)
    (context / "Dockerfile").write_text(text)
    build = build_image(context, text, tag, urls)
    flags = [w for k, v in sorted(urls.items()) for w in ("--build-arg", f"{k}={v}")]
    cache = ["--cache-dir", str(tmp / "cache")]
    predicted = _json(
        cli_streams("predict", str(context / "Dockerfile"), *flags, "-f", "json", *cache)
    )
    first = 4  # the line of the first case: FROM, ARG, ARG come before
    by_line = {s["prediction"]["line"]: s for s in predicted["steps"] if "prediction" in s}
    built: dict[int, dict[str, Any]] = {}
    if build_ok:
        build.check()
        audit = _json(cli_streams("audit", f"containers-storage:{tag}", "-f", "json", *cache))
        base_steps = len(audit["steps"]) - (len(steps) + 2)
        built = {s["index"] - base_steps + 1: s for s in audit["steps"]}
        remove_image(tag)
    else:
        assert not build.ok, build.log[-2000:]
    cases = {key: Case(built.get(first + i), by_line[first + i]) for i, key in enumerate(steps)}
    return Built(cases, build.log)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, IndexServer]]:
    root = tmp_path_factory.mktemp("resolver-wheels")
    build_wheels(MAIN, root / "main")
    build_wheels(EXTRA, root / "extra")
    with ExitStack() as stack:
        yield {
            "INDEX_URL": stack.enter_context(serve_index(root / "main")),
            "EXTRA_URL": stack.enter_context(serve_index(root / "extra")),
        }


@pytest.fixture(scope="module")
def cases(
    base_image: str, indexes: dict[str, IndexServer], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Case]:
    urls = {k: v.url for k, v in indexes.items()}
    tmp = tmp_path_factory.mktemp("resolvers")
    done = _run(base_image, STEPS, "localhost/pinguard-test/predict-resolvers:ok", urls, tmp, True)
    fail = _run(
        base_image, FAILING, "localhost/pinguard-test/predict-resolvers:fails", urls, tmp, False
    )
    assert "No matching distribution found for ccc>=1.5" in fail.log, fail.log[-2000:]
    return {**done.cases, **fail.cases}


def _agrees(case: Case) -> None:
    """The prediction equals what pip did, and pip's own resolver, asked, agreed."""
    assert case.built is not None
    prediction = case.predicted["prediction"]
    assert prediction["status"] == "predicted", prediction
    assert any(n.endswith("agrees") and n.startswith("pip ") for n in prediction["notes"])
    assert case.predicted["changes"] == case.built["changes"]


def test_upgrade_only_if_needed(cases: dict[str, Case]) -> None:
    case = cases["upgrade"]
    assert case.built is not None
    assert Case.moves(case.built) == {"aaa": ("upgraded", "1.0", "2.0")}  # bbb stays 1.0
    _agrees(case)


def test_upgrade_eager(cases: dict[str, Case]) -> None:
    case = cases["upgrade-eager"]
    assert case.built is not None
    assert Case.moves(case.built) == {
        "eaa": ("upgraded", "1.0", "2.0"),
        "ebb": ("upgraded", "1.0", "2.0"),
    }
    _agrees(case)


def test_pre_takes_the_release_candidate(cases: dict[str, Case]) -> None:
    case = cases["pre"]
    assert case.built is not None
    assert Case.moves(case.built) == {"fff": ("added", None, "1.1rc1")}
    _agrees(case)


def test_without_pre_the_final_release(cases: dict[str, Case]) -> None:
    case = cases["no-pre"]
    assert case.built is not None
    assert Case.moves(case.built) == {"ggg": ("added", None, "1.0")}
    _agrees(case)


def test_extra_index_with_a_newer_version(cases: dict[str, Case]) -> None:
    case = cases["extra-newer"]
    assert case.built is not None
    assert Case.moves(case.built) == {"hhh": ("added", None, "2.0")}
    _agrees(case)


def test_one_version_on_both_indexes(cases: dict[str, Case]) -> None:
    """pip took the extra index's file (its resolver walks the sorted candidates from the end):
    reinstalling from the main index then reinstalls for real, other files of the same
    version; the prediction names the file it installs the same way and says so too."""
    assert cases["extra-tie"].built is not None
    assert Case.moves(cases["extra-tie"].built) == {"iii": ("added", None, "1.0")}
    _agrees(cases["extra-tie"])
    case = cases["extra-tie-reinstall"]
    assert case.built is not None
    assert Case.moves(case.built) == {"iii": ("reinstalled", "1.0", "1.0")}
    _agrees(case)


def test_backtracking_order_differs_and_is_said(cases: dict[str, Case]) -> None:
    case = cases["backtracking"]
    assert case.built is not None
    assert Case.moves(case.built) == {
        "top": ("added", None, "1.0"),
        "xx": ("added", None, "2.0"),
        "yy": ("added", None, "1.0"),
        "zz": ("added", None, "1.0"),
    }
    prediction = case.predicted["prediction"]
    assert prediction["status"] == "unpredicted"
    reason = prediction["reason"]
    assert reason.startswith(
        "uv and pip resolve this step differently: uv installs top==1.0, xx==1.0, yy==2.0, "
        "zz==2.0; pip "
    ), reason
    assert reason.endswith("installs top==1.0, xx==2.0, yy==1.0, zz==1.0"), reason
    assert "the image runs pip 23.0.1" in reason


def test_a_pre_release_only_dependency_fails_pip_and_is_said(cases: dict[str, Case]) -> None:
    """uv takes ``ccc 2.0b1`` when nothing final fits ``ccc>=1.5``; pip before 26.0 does not
    (the build failed here, the fixture checked the log), and this machine's pip 26 would
    agree with uv, so the prediction says it from the image's pip version."""
    case = cases["prerelease-only"]
    assert case.built is None
    prediction = case.predicted["prediction"]
    assert prediction["status"] == "unpredicted"
    assert prediction["reason"] == (
        "uv installs ccc 2.0b1, a pre-release that no --pre allows and no specifier on ccc "
        "names; pip 23.0.1 (the image's: pip before 26.0 takes no such pre-release) would "
        "find no version to install and fail this step"
    )
