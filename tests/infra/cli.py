"""Running the real pinguard CLI in-process for the tests, with what it printed captured.

One home for the in-process run (``pinguard.cli.main`` with stdout and stderr redirected);
tests that use pytest's ``capsys`` instead keep doing so.
"""

from __future__ import annotations

import contextlib
import io
import sys

from pinguard.cli import main


def cli_streams(*argv: str) -> tuple[int, str, str]:
    """Run ``pinguard argv...``; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cli(*argv: str) -> tuple[int, str]:
    """Run ``pinguard argv...``; (exit code, stdout followed by stderr)."""
    code, out, err = cli_streams(*argv)
    return code, out + err


#: ``python -m pinguard`` taking Ctrl-C as a terminal's job does even when the test run itself
#: was started in the background, where SIGINT arrives ignored and Python keeps it ignored.
PINGUARD_WITH_CTRL_C = (
    sys.executable,
    "-c",
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'pinguard'; runpy.run_module('pinguard', run_name='__main__')",
)
