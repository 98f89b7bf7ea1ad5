"""Helpers that start the real components the tests use (registry, daemon, builds, index)."""
