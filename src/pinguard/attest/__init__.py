"""Attestations: the audit's verdict, signed, travelling with the image.

This package owns the attestation concept. ``statement`` turns an ``AuditResult`` (already
judged) into an in-toto Statement v1 with pinguard's own predicate; ``dsse`` signs and
verifies it as a DSSE envelope; ``keys`` loads the ECDSA P-256 keys (PEM, as openssl and
cosign write them); ``store`` attaches an envelope to an image as an OCI 1.1 referrer and
finds the envelopes attached to a digest (through ``pinguard.sources.registry``);
``verify`` checks each envelope against an image digest, a key and the caller's demands and
returns the reasons as data. Nothing here prints or exits.
"""
