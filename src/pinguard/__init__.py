"""pinguard: audit, judge, repair and gate the Python dependencies of container images."""

__version__ = "0.1.0"
