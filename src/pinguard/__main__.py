"""Entry point for ``python -m pinguard``."""

from pinguard.cli import main

raise SystemExit(main())
