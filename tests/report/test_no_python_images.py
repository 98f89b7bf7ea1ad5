"""An image without any Python environment is an explicit status in every format, on real images.

The image is a plain Debian bookworm (``debootstrap --variant=minbase``, no Python; built
once and cached by ``tests/infra/build.ensure_plain_image``) pushed to a real
``docker-registry`` on 127.0.0.1 and read from there with ``docker://`` (integration); the
tests that need only that image also run on a crafted OCI layout in the fast set. Each format is
rendered through the CLI, with and without ``--allow-no-python``, and the status sentence,
the exit code and the verdict are checked against values written here by hand: the JSON
against the audit schema, SARIF against the vendored 2.1.0 schema, CycloneDX against the
official 1.6 schema, the HTML in headless Chromium. ``compare`` puts the plain image on
either side of the Debian + Python base image. A policy with every rule off says "nothing
could fire" in every format that carries findings.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from pinguard.cli import main
from pinguard.testing.images import ImageWriter, layer_tar
from tests.conftest import require_build_tools
from tests.infra.browser import file_url, open_browser
from tests.infra.build import ensure_plain_image
from tests.infra.paths import AUDIT_SCHEMA, COMPARE_SCHEMA, SARIF_SCHEMA
from tests.infra.registry import RegistryServer
from tests.infra.tools import require_tool
from tests.report.test_html_browser import keep_screenshot

REPO = "pinguard/debian-plain:bookworm"
FAILS = "the gate fails unless --allow-no-python"
ALLOWED = "allowed by --allow-no-python"


def _crafted(directory: Path) -> str:
    """An OCI layout written by ``pinguard.testing.images``: os-release and a dpkg status of
    one package, no Python (the fast set's stand-in for the real image)."""
    writer = ImageWriter(directory)
    files = {
        "etc/os-release": b'ID=debian\nVERSION_ID="12"\n',
        "var/lib/dpkg/status": b"Package: base-files\nStatus: install ok installed\n"
        b"Architecture: amd64\nVersion: 12.4+deb12u11\n\n",
    }
    desc = writer.layer(layer_tar(files))
    image = writer.image([desc], [{"created_by": "ADD rootfs.tar /"}])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{directory}:t"


@pytest.fixture(
    scope="module", params=["layout", pytest.param("registry", marks=pytest.mark.integration)]
)
def plain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image without Python: ``oci:`` of a crafted layout, or the real plain Debian image
    as ``docker://127.0.0.1:PORT/pinguard/debian-plain:bookworm``."""
    if request.param == "layout":
        return _crafted(tmp_path_factory.mktemp("plain-layout") / "layout")
    require_build_tools()
    require_tool("podman")
    require_tool("debootstrap")
    registry: RegistryServer = request.getfixturevalue("scenario_registry")
    tag = ensure_plain_image()
    registry.push(f"containers-storage:{tag}", REPO)
    return f"docker://{registry.ref(REPO)}"


@pytest.fixture(scope="module")
def with_python(base_image: str, scenario_registry: RegistryServer) -> str:
    """The Debian + python3/pip/venv base image, from the same registry."""
    scenario_registry.push(f"containers-storage:{base_image}", "pinguard/python-base:bookworm")
    return f"docker://{scenario_registry.ref('pinguard/python-base:bookworm')}"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One layer cache for the module, so each format does not stream the image again."""
    return tmp_path_factory.mktemp("no-python-cache")


def _run(capsys: pytest.CaptureFixture[str], cache: Path, *argv: str) -> tuple[int, str]:
    code = main([*argv, "--cache-dir", str(cache)])
    return code, capsys.readouterr().out


def _status(ref: str, allowed: bool) -> str:
    return f"no Python environment found in {ref} ({ALLOWED if allowed else FAILS})"


def test_table_says_no_python_and_fails_unless_allowed(
    plain: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table states it; exit 1 by default and even at --fail-on never (like something
    incomplete), 0 with --allow-no-python."""
    code, out = _run(capsys, cache, "audit", plain)
    assert code == 1
    assert _status(plain, False) in out
    assert "verdict: fail" in out
    assert "environments:" not in out
    assert _run(capsys, cache, "audit", plain, "--fail-on", "never")[0] == 1
    code, out = _run(capsys, cache, "audit", plain, "--allow-no-python")
    assert code == 0
    assert _status(plain, True) in out
    assert "verdict: pass" in out


SCHEMA = json.loads(AUDIT_SCHEMA.read_text())


def test_json_has_the_status_field_and_validates(
    plain: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = SCHEMA
    code, out = _run(capsys, cache, "audit", plain, "--format", "json")
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    assert code == 1
    assert doc["environments"] == []
    assert doc["no_python_environment"] == {
        "message": f"no Python environment found in {plain}",
        "allowed": False,
    }
    assert doc["verdict"] == "fail"
    assert doc["debian_packages"]  # the image was read: dpkg's status is there
    code, out = _run(capsys, cache, "audit", plain, "--format", "json", "--allow-no-python")
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    assert (code, doc["no_python_environment"]["allowed"], doc["verdict"]) == (0, True, "pass")


@pytest.mark.integration
def test_json_of_an_image_with_python_has_no_status_key(
    with_python: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its documents keep their bytes: no ``no_python_environment`` key at all."""
    code, out = _run(capsys, cache, "audit", with_python, "--format", "json")
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    assert (code, doc["verdict"]) == (0, "pass")
    assert "no_python_environment" not in doc
    assert [e["path"] for e in doc["environments"]] == ["/usr/lib/python3/dist-packages"]


def test_markdown_states_it(plain: str, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, cache, "audit", plain, "--format", "markdown")
    assert code == 1
    assert out.startswith(f"### :x: pinguard: **fail** for `{plain}`")
    assert f"**{_status(plain, False)}**" in out.splitlines()
    code, out = _run(capsys, cache, "audit", plain, "--format", "markdown", "--allow-no-python")
    assert code == 0
    assert f"**{_status(plain, True)}**" in out.splitlines()


def test_sarif_has_a_notification(
    plain: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error notification ``no-python-environment`` (a note when allowed); the run itself
    succeeded, so ``executionSuccessful`` stays true."""
    schema = json.loads(SARIF_SCHEMA.read_text())
    for extra, level, allowed in (((), "error", False), (("--allow-no-python",), "note", True)):
        code, out = _run(capsys, cache, "audit", plain, "--format", "sarif", *extra)
        log = json.loads(out)
        jsonschema.Draft7Validator(schema).validate(log)
        assert code == (0 if allowed else 1)
        invocation = log["runs"][0]["invocations"][0]
        assert invocation["executionSuccessful"] is True
        assert invocation["toolExecutionNotifications"] == [
            {
                "level": level,
                "message": {"text": _status(plain, allowed)},
                "descriptor": {"id": "no-python-environment"},
            }
        ]


def test_junit_has_a_failing_testcase(
    plain: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing case ``pinguard.python`` / ``python environments``; skipped when allowed."""
    code, out = _run(capsys, cache, "audit", plain, "--format", "junit")
    assert code == 1
    root = ET.fromstring(out)
    case = root.find("./testsuite/testcase[@classname='pinguard.python']")
    assert case is not None
    assert case.get("name") == "python environments"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "no-python-environment"
    assert failure.get("message") == _status(plain, False)
    assert root.get("failures") == "1"
    code, out = _run(capsys, cache, "audit", plain, "--format", "junit", "--allow-no-python")
    assert code == 0
    case = ET.fromstring(out).find("./testsuite/testcase[@classname='pinguard.python']")
    assert case is not None
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("message") == _status(plain, True)
    assert case.find("failure") is None


def test_sboms_carry_a_property_and_an_annotation(
    plain: str, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CycloneDX: ``pinguard:python-environments=none`` on the image component (validated
    against the strict 1.6 schema); SPDX: the same pair as an annotation on the image."""
    code, out = _run(capsys, cache, "audit", plain, "--format", "cyclonedx")
    assert code == 1  # the exit code is the gate's, whatever the format
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(out) is None
    bom = json.loads(out)
    props = bom["metadata"]["component"]["properties"]
    assert {"name": "pinguard:python-environments", "value": "none"} in props
    assert not [c for c in bom.get("components", []) if "pkg:pypi/" in c.get("purl", "")]
    code, out = _run(capsys, cache, "audit", plain, "--format", "spdx")
    doc = json.loads(out)
    image = next(p for p in doc["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert [a["comment"] for a in image["annotations"]] == ["pinguard:python-environments=none"]
    assert image["annotations"][0]["annotationType"] == "OTHER"


def test_html_shows_the_status_in_the_browser(
    plain: str, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no-python.html"
    assert (
        main(["audit", plain, "--cache-dir", str(cache), "--format", "html", "-o", str(out)]) == 1
    )
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(file_url(out))
        status = driver.find_element(By.ID, "no-python-a")
        assert status.is_displayed()
        assert status.text == _status(plain, False)
        assert driver.find_element(By.ID, "verdict").text == "FAIL"  # CSS upper-cases it
        keep_screenshot(driver, tmp_path, "audit-no-python")


def _compare(
    capsys: pytest.CaptureFixture[str], cache: Path, a: str, b: str, *extra: str
) -> tuple[int, dict[str, Any]]:
    code, out = _run(capsys, cache, "compare", a, b, "--format", "json", *extra)
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(COMPARE_SCHEMA.read_text()))
    return code, doc


@pytest.mark.integration
def test_compare_names_the_side_without_python(
    plain: str, with_python: str, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plain Debian as A, then as B: the side without Python carries the status in json,
    table, markdown, sarif, junit and html (in the browser); either side fails the verdict
    unless allowed."""
    code, doc = _compare(capsys, cache, plain, with_python)
    assert code == 1
    assert doc["a"]["no_python_environment"] == {
        "message": f"no Python environment found in {plain}",
        "allowed": False,
    }
    assert "no_python_environment" not in doc["b"]
    assert doc["verdict"] == "fail"
    code, doc = _compare(capsys, cache, plain, with_python, "--allow-no-python")
    assert (code, doc["verdict"], doc["a"]["no_python_environment"]["allowed"]) == (0, "pass", True)

    code, doc = _compare(capsys, cache, with_python, plain)
    assert code == 1
    assert "no_python_environment" not in doc["a"]
    assert doc["b"]["no_python_environment"]["message"] == f"no Python environment found in {plain}"

    for side, a, b in (("A", plain, with_python), ("B", with_python, plain)):
        line = f"{side}: {_status(plain, False)}"
        code, out = _run(capsys, cache, "compare", a, b)
        assert code == 1
        assert line in out
        code, out = _run(capsys, cache, "compare", a, b, "--format", "markdown")
        assert f"**{line}**" in out.splitlines()
        code, out = _run(capsys, cache, "compare", a, b, "--format", "sarif")
        notes = json.loads(out)["runs"][0]["invocations"][0]["toolExecutionNotifications"]
        assert [n["message"]["text"] for n in notes] == [line]
        code, out = _run(capsys, cache, "compare", a, b, "--format", "junit")
        case = ET.fromstring(out).find("./testsuite/testcase[@classname='pinguard.python']")
        assert case is not None
        assert case.get("name") == f"python environments ({side})"
    html = tmp_path / "compare-no-python.html"
    argv = ["compare", plain, with_python, "--format", "html", "-o", str(html)]
    assert _run(capsys, cache, *argv)[0] == 1
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(file_url(html))
        assert driver.find_element(By.ID, "no-python-a").text == f"A: {_status(plain, False)}"
        assert not driver.find_elements(By.ID, "no-python-b")
        keep_screenshot(driver, tmp_path, "compare-no-python")


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["table", "json", "markdown", "html", "sarif", "junit"])
def test_every_rule_off_says_nothing_could_fire_in_every_format(
    with_python: str, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """The real Debian + Python image judged by a policy with every rule off: the notice is
    in each format that carries findings, and the gate fails (exit 1)."""
    from tests.policy.test_no_active_rules import ALL_RULES as rules

    policy = tmp_path / "off.toml"
    policy.write_text("".join(f"[rules.{r}]\nenabled = false\n" for r in rules))
    code, out = _run(capsys, cache, "audit", with_python, "--policy", str(policy), "--format", fmt)
    assert code == 1
    expected = f"nothing could fire: every rule is off in {policy}"
    if fmt == "table":
        # the findings table wraps the message inside its cell: read the cells back, and
        # compare without the whitespace the wrapping moved
        cells = [line.split("│") for line in out.splitlines() if line.count("│") >= 6]
        assert "no-active-rules" in {c[2].strip() for c in cells}
        message = "".join(c[5] for c in cells)
        assert "".join(expected.split()) in "".join(message.split())
    else:
        assert expected in out
        assert "no-active-rules" in out
