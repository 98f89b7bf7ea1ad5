"""Helpers that write images for pinguard's tests, benchmarks and demo (never used by an audit).

``images`` writes deterministic layer tars, OCI layouts and OCI archives; ``demo`` holds the
bundled demo image's story (a silent NCCL downgrade) and the ``Dist``/``Layer`` values that
describe synthetic images like it.
"""
