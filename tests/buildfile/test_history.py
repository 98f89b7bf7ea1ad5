"""history: the command a history entry ran, without its builder's prefixes, and its line."""

from __future__ import annotations

import pytest

from pinguard.buildfile.history import command_text, dockerfile_step_lines, strip_build_args
from pinguard.models import Step


@pytest.mark.parametrize(
    ("created_by", "command"),
    [
        # docker (classic builder) and buildah
        ("/bin/sh -c pip install x", "pip install x"),
        ("|2 A=1 B= /bin/sh -c pip install x", "pip install x"),
        ("|0 /bin/sh -c make", "make"),
        ("/bin/sh -c #(nop)  ENV A=b", "ENV A=b"),
        ("/bin/sh -c #(nop) COPY file:abc in /x ", "COPY file:abc in /x"),
        ('/bin/sh -c #(nop)  CMD ["python3"]', 'CMD ["python3"]'),
        ("/bin/bash -c set -e\n  pip install x", "set -e\n  pip install x"),
        # BuildKit
        ("RUN /bin/sh -c pip install x # buildkit", "pip install x"),
        ("RUN |1 V=2 /bin/sh -c make install # buildkit", "make install"),
        ("ENV A=b", "ENV A=b"),
        ("WORKDIR /app", "WORKDIR /app"),
        ("COPY c.txt /c.txt # buildkit", "COPY c.txt /c.txt"),
        ("", ""),
    ],
)
def test_command_text(created_by: str, command: str) -> None:
    """RUN, build args, the shell, #(nop) and the BuildKit mark are peeled off."""
    assert command_text(created_by) == command


@pytest.mark.parametrize(
    ("created_by", "shown"),
    [
        ("|1 V=2 /bin/sh -c pip  install\n x", "/bin/sh -c pip install x"),
        ("RUN |2 A=1 B=2 /bin/sh -c make # buildkit", "RUN /bin/sh -c make # buildkit"),
        ("/bin/sh -c pip install x", "/bin/sh -c pip install x"),
        ("/bin/sh -c echo '|1 A=b'", "/bin/sh -c echo '|1 A=b'"),
    ],
)
def test_strip_build_args(created_by: str, shown: str) -> None:
    """Only the leading |N NAME=value words go; the shell stays, whitespace is one space."""
    assert strip_build_args(created_by) == shown


DOCKERFILE = """\
FROM python:3.11 AS builder
RUN echo builder
FROM builder
ARG V=1
ENV A=b
RUN pip install \\
    x==1
COPY c.txt /c.txt
RUN ["pip", "check"]
"""


def test_dockerfile_step_lines() -> None:
    """Steps align from the end with the last stage; base-image steps map to nothing."""
    steps = [
        Step(1, "/bin/sh -c #(nop) ADD file:base in / ", "sha256:1"),
        Step(2, "/bin/sh -c echo builder", "sha256:2"),
        Step(3, "/bin/sh -c #(nop)  ARG V=1", None),
        Step(4, "/bin/sh -c #(nop)  ENV A=b", None),
        Step(5, "|1 V=1 /bin/sh -c pip install     x==1", "sha256:5"),
        Step(6, "/bin/sh -c #(nop) COPY file:abc in /c.txt", "sha256:6"),
        Step(7, "RUN pip check # buildkit", None),
    ]
    assert dockerfile_step_lines(DOCKERFILE, steps) == {3: 4, 4: 5, 5: 6, 6: 8, 7: 9}


def test_dockerfile_step_lines_unparsable() -> None:
    """A Dockerfile that does not parse, or has no stage, gives no mapping."""
    steps = [Step(1, "/bin/sh -c make", None)]
    assert dockerfile_step_lines("RUN make\n", steps) == {}
    assert dockerfile_step_lines("", steps) == {}
