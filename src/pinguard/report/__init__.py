"""Renderers: one per output format, each a pure function over the same ``AuditResult``."""
