"""`IndexOptions.for_tool`: a pip command line is replayed with pip's index semantics."""

from __future__ import annotations

import pytest

from pinguard.repair.resolve import IndexOptions

EXTRA = IndexOptions(index_url="https://a/simple", extra_index_urls=("https://b/simple",))


@pytest.mark.parametrize(
    ("tool", "given", "strategy"),
    [
        ("pip", EXTRA, "unsafe-best-match"),  # pip picks the best version across indexes
        ("uv", EXTRA, None),  # uv's own default (first-index) stays
        ("pip", IndexOptions(index_url="https://a/simple"), None),  # one index: nothing to merge
        (
            "pip",
            IndexOptions(extra_index_urls=("https://b/simple",), index_strategy="first-index"),
            "first-index",
        ),
    ],
)
def test_for_tool(tool: str, given: IndexOptions, strategy: str | None) -> None:
    assert given.for_tool(tool).index_strategy == strategy
    assert given.for_tool(tool).extra_index_urls == given.extra_index_urls
