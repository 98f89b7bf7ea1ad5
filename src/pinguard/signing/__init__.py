"""Signing primitives shared by what pinguard signs: DSSE envelopes and PEM keys.

``dsse.py`` (DSSE envelopes over ECDSA P-256) and ``keys.py`` (loading PEM keys, key ids)
know nothing of what they sign, so both the audit attestations (``pinguard.attest``) and the
fleet's shared cache entries (``pinguard.cache.signed``) use them without importing
each other.
"""
