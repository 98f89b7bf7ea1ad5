"""Regenerate the screenshots in docs/img/ from the bundled demo image, in headless Chromium.

Builds the demo OCI archive (``examples/make_demo_image.py``) and the same image without its
nightly step, renders ``pinguard audit --format html`` of the demo and ``pinguard compare
--format html`` of the pair, opens each in Debian's headless Chromium (the test suite's
driver, ``tests/infra/browser.py``), opens the downgraded NCCL cell's "why", and saves
``docs/img/report-audit.png`` and ``docs/img/report-compare.png``.
Usage: ``.venv/bin/python scripts/docs_screenshots.py [OUT_DIR]``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.make_demo_image import build_demo, demo_layers, write_oci_archive  # noqa: E402
from tests.infra.browser import open_browser  # noqa: E402

from pinguard.cli import main as pinguard  # noqa: E402

NCCL_CELL = 'td.k-downgraded[title*="nvidia-nccl-cu13==2.29.7"] summary'


def main(argv: list[str]) -> int:
    out = (Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "img").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pinguard-docs-") as tmp:
        work = Path(tmp)
        demo, before = work / "demo.tar", work / "before.tar"
        build_demo(demo, tag="2026-11-29")
        empty = {1: "ENV PIP_NO_CACHE_DIR=1", 3: "LABEL org.opencontainers.image.title=glm-serving"}
        write_oci_archive(demo_layers()[:3], before, tag="2026-11-22", empty_steps=empty)
        os.chdir(work)  # relative references, so the pictures show no temporary path
        pages = {
            "report-audit": ["audit", "oci-archive:demo.tar:2026-11-29"],
            "report-compare": [
                "compare",
                "oci-archive:before.tar:2026-11-22",
                "oci-archive:demo.tar:2026-11-29",
            ],
        }
        from selenium.webdriver.common.by import By

        with open_browser(1280, 900) as driver:
            for name, args in pages.items():
                page = work / f"{name}.html"
                pinguard([*args, "--no-cache", "--format", "html", "-o", str(page)])
                driver.get(page.as_uri())
                for summary in driver.find_elements(By.CSS_SELECTOR, NCCL_CELL):
                    summary.click()
                driver.execute_script(
                    "window.scrollTo(0, 0);"
                    "document.querySelectorAll('.scroll').forEach(function (e) {"
                    " e.scrollLeft = 0; e.scrollTop = 0; });"
                )
                height = driver.execute_script("return document.body.scrollHeight")
                driver.set_window_size(1280, min(max(900, height), 2400))
                target = out / f"{name}.png"
                driver.save_screenshot(str(target))
                print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
