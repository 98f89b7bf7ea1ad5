"""The fast RECORD reader against csv + posixpath.normpath on the same inputs."""

from __future__ import annotations

import csv
import io
import posixpath

import pytest

from pinguard.catalog.python import _parse_record, record_fingerprint


def _reference(env: str, data: bytes) -> list[tuple[str, str]]:
    out = []
    for row in csv.reader(io.StringIO(data.decode())):
        if row and row[0]:
            path = posixpath.normpath(posixpath.join(env, row[0]))
            out.append((path, row[1] if len(row) > 1 else ""))
    return sorted(out)


@pytest.mark.parametrize(
    "data",
    [
        b"a/b.py,sha256=x,1\n../../../bin/t,sha256=y,2\nx-1.dist-info/RECORD,,\n\n",
        b"/abs/p,,\n./c,,\nd/.,,\na//b,,\n",
        b'"we,ird/p.py",sha256=z,3\r\nq.py,sha256=w\r\n',
        b"only-a-path\n",
        b"",
    ],
)
@pytest.mark.parametrize(
    "env", ["/usr/lib/python3/dist-packages", "/opt/venv/lib/python3.11/site-packages/"]
)
def test_record_rows_match_csv_and_normpath(data: bytes, env: str) -> None:
    """Every row gives the same absolute path and hash as the library route."""
    assert _parse_record(env, data) == _reference(env, data)


def test_fingerprint_ignores_bytecode_and_bookkeeping_only() -> None:
    """Identical files reinstalled (new .pyc, INSTALLER) keep the fingerprint; new bytes do not."""
    a = _parse_record(
        "/e",
        b"x/__init__.py,sha256=aa,1\nx/__pycache__/a.pyc,sha256=p1,3\nx-1.dist-info/INSTALLER,sha256=i,4\n",
    )
    b = _parse_record("/e", b"x/__pycache__/a.pyc,sha256=p2,3\nx/__init__.py,sha256=aa,1\n")
    c = _parse_record("/e", b"x/__init__.py,sha256=ab,1\n")
    assert record_fingerprint(a) == record_fingerprint(b)
    assert record_fingerprint(a) != record_fingerprint(c)
