"""``pinguard probe``: what a process in the image really maps, beside the prediction.

Wires ``pinguard.probe`` to the command line: ``--import MODULE`` and ``--load PATH`` in the
order given, a table or JSON, exit 1 when a mapped library differs from the prediction.
"""

from __future__ import annotations

import argparse
import json
import sys

from pinguard.errors import EXIT_FINDINGS, EXIT_PASS
from pinguard.report.formats import PROBE_FORMATS


class _Ordered(argparse.Action):
    """Appends (kind, value) to ``loads`` so --import and --load keep their order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        loads = list(getattr(namespace, "loads", None) or [])
        loads.append(("import" if option_string == "--import" else "load", str(values)))
        namespace.loads = loads


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "probe",
        help="run the image's Python, import modules, and compare the mapped libraries with "
        "the audit's prediction",
        description="Run a locally stored image or a local image archive (buildah), import "
        "modules or load libraries "
        "by path, read /proc/self/maps, and compare each watched library (NCCL, cuDNN, cuBLAS, "
        "cudart) with what the audit of the same root filesystem predicts. Exit 1 when they "
        "disagree.",
    )
    p.add_argument(
        "image",
        metavar="IMAGE",
        help="an image in local container storage, or a local OCI archive, docker archive or "
        "OCI layout (PATH, oci-archive:PATH[:TAG], ...), as audit reads it",
    )
    p.add_argument("--import", action=_Ordered, metavar="MODULE", dest="loads_import")
    p.add_argument("--load", action=_Ordered, metavar="PATH", dest="loads_load")
    p.add_argument("--python", default="python3", help="the interpreter in the image")
    p.add_argument("-f", "--format", choices=PROBE_FORMATS, default="table")
    p.set_defaults(func=run, loads=[])


def run(args: argparse.Namespace) -> int:
    from pinguard.probe import probe

    result, _audit = probe(args.image, args.loads, args.python)
    if args.format == "json":
        doc = {
            "image": result.image,
            "loads": [list(x) for x in result.loads],
            "libraries": [r.to_json() for r in result.rows],
            "agrees": not result.disagreements,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        print(f"probe {result.image}: " + ", ".join(f"{k} {v}" for k, v in result.loads))
        for row in result.rows:
            mark = "ok  " if row.agrees else "DIFF"
            predicted = ", ".join(row.predicted) or "nothing predicted"
            print(
                f"  {mark} {row.soname}: mapped {row.observed}; predicted {predicted}"
                + (f" ({row.basis})" if row.basis else "")
            )
        if not result.rows:
            print("  no watched library was mapped")
        print("verdict: " + ("fail" if result.disagreements else "pass"))
    return EXIT_FINDINGS if result.disagreements else EXIT_PASS
