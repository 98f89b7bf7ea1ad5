"""Repair: the known-good state, constraints files, install plans, and the resolver (uv)."""
