"""JUnit XML: one test case per (rule, package), so CI systems show policy results as tests.

Findings are grouped by rule and package; a group with an unwaived finding at or above
``fail_on`` is a failure whose text lists every finding of the group, a group whose findings
are all waived is skipped with the waiver reasons, and the rest pass with their findings in
``system-out``. Each thing that could not be read is an errored test case, because a gate
never passes on it; an image without any Python environment is a failing case
``pinguard.python`` (skipped with ``--allow-no-python``). ``rules`` adds a passing case for
each listed rule that found nothing.
The document is built with ``xml.etree`` (so it always parses back) and sorted.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence

from pinguard import __version__
from pinguard.models import AuditResult, Finding
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.summary import policy_pairs

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
NO_PACKAGE = "(image)"


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _line(f: Finding) -> str:
    where = ", ".join(
        p
        for p in (
            f"step {f.step}" if f.step is not None else "",
            f.environment or "",
            f"{f.policy_file}:{f.policy_line}" if f.policy_file else "",
        )
        if p
    )
    waived = f" [waived: {f.waiver_reason}]" if f.waived else ""
    return _clean(f"[{f.severity.value}] {f.message}" + (f" ({where})" if where else "") + waived)


def render(
    result: AuditResult,
    options: RenderOptions = DEFAULT_OPTIONS,
    *,
    statuses: Sequence[tuple[str, str]] | None = None,
) -> str:
    """The JUnit XML report of ``result.findings`` (``options.fail_on`` None: nothing fails).

    The suite is named after ``options.title``; ``options.rules`` get a passing case each.
    An image without a Python environment is a failing case (skipped with
    ``--allow-no-python``); ``statuses`` are the (side, line) pairs to report (default:
    ``result``'s own; a comparison passes both sides').
    """
    fail_on, rules, suite_name = options.fail_on, options.rules, options.title
    groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in result.findings:
        groups[(f.rule, f.package or NO_PACKAGE)].append(f)
    for rule in rules:
        if not any(r == rule for r, _ in groups):
            groups[(rule, "all packages")] = []

    suite = ET.Element("testsuite", name=_clean(f"{suite_name}: {result.image.reference}"))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="image", value=_clean(result.image.reference))
    if result.image.manifest_digest:
        ET.SubElement(props, "property", name="manifest_digest", value=result.image.manifest_digest)
    if result.image.platform is not None:
        ET.SubElement(props, "property", name="platform", value=str(result.image.platform))
    ET.SubElement(props, "property", name="pinguard:version", value=__version__)
    for name, value in policy_pairs(result):
        ET.SubElement(props, "property", name=name, value=_clean(value))

    tests = failures = errors = skipped = 0
    for (rule, package), found in sorted(groups.items()):
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=f"pinguard.{rule}", name=_clean(package))
        open_ = [f for f in found if not f.waived]
        failing = [f for f in open_ if fail_on is not None and f.severity.rank >= fail_on.rank]
        if failing:
            failures += 1
            worst = max(failing, key=lambda f: f.severity.rank)
            failure = ET.SubElement(
                case, "failure", type=worst.severity.value, message=_clean(worst.message)
            )
            failure.text = "\n".join(_line(f) for f in found)
        elif found and not open_:
            skipped += 1
            reasons = sorted({f.waiver_reason or "waived" for f in found})
            ET.SubElement(case, "skipped", message=_clean("waived: " + "; ".join(reasons)))
            ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in found)
        elif found:
            ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in found)

    for item in sorted(result.incomplete, key=lambda i: (i.what, i.why)):
        tests += 1
        errors += 1
        case = ET.SubElement(
            suite, "testcase", classname="pinguard.incomplete", name=_clean(item.what)
        )
        ET.SubElement(case, "error", type="incomplete", message=_clean(item.why))

    if statuses is None:
        statuses = options.no_python_statuses(result)
    for side, text in statuses:
        tests += 1
        name = f"python environments ({side})" if side else "python environments"
        case = ET.SubElement(suite, "testcase", classname="pinguard.python", name=_clean(name))
        if options.allow_no_python:
            skipped += 1
            ET.SubElement(case, "skipped", message=_clean(text))
        else:
            failures += 1
            ET.SubElement(case, "failure", type="no-python-environment", message=_clean(text))

    counts = {
        "tests": str(tests),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
    }
    for key, value in counts.items():
        suite.set(key, value)
    root = ET.Element("testsuites", name=suite_name)
    for key in ("tests", "failures", "errors"):
        root.set(key, counts[key])
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
