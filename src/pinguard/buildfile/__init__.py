"""Builds: Dockerfile parsing, pip/uv command lines, lint rules and the in-build guard."""
