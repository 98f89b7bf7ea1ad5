"""The error hierarchy: one base error per layer, each mapped by the CLI to an exit code.

Exit codes (documented in docs/reliability.md and the README): 0 pass, 1 findings at or
above --fail-on or something incomplete, 2 usage or configuration error, 3 the image could
not be read or a host a command needed (registry, daemon, package index) could not be
reached, 130 interrupted (the CLI's own).
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_IMAGE = 3
EXIT_UNREACHABLE = EXIT_IMAGE  # "could not reach HOST": a registry, a daemon or an index
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT (128 + 2)


class PinguardError(Exception):
    """Base of every error pinguard raises on purpose."""

    exit_code = EXIT_USAGE


class IncompleteAudit(PinguardError):
    """The audit a command builds on could not read everything (or found no Python), so
    what the command would write might miss something; the command refuses (exit 1)."""

    exit_code = EXIT_FINDINGS


class UsageError(PinguardError):
    """The command line or a file it names is wrong."""

    exit_code = EXIT_USAGE


class OutputError(UsageError):
    """An output file (``-o``) could not be written; an existing one is left intact."""


class InvalidReference(UsageError, ValueError):
    """An image reference that no transport understands."""


class InvalidPlatform(UsageError, ValueError):
    """A platform string that is not ``os/arch[/variant]``."""


class ConfigError(PinguardError):
    """A policy, constraints or configuration file is wrong."""

    exit_code = EXIT_USAGE


class SourceError(PinguardError):
    """The image could not be read: not found, auth, network, corrupt."""

    exit_code = EXIT_IMAGE


class ImageNotFound(SourceError):
    """The image (or a tag, platform or blob in it) does not exist."""


class AuthError(SourceError):
    """The registry or daemon refused our credentials."""


class BlobVerificationError(SourceError):
    """A blob's bytes did not match its digest or size."""


class InvalidDigest(SourceError, ValueError):
    """A digest string that is not ``sha256:<64 hex>`` or ``sha512:<128 hex>``."""


class UnsupportedArtifact(SourceError):
    """The reference names something that is not a container image (an SBOM, a signature)."""


class LayerError(SourceError):
    """A layer stream is corrupt (bad compression or tar)."""


class ResolveError(PinguardError):
    """The resolver (uv, pip-tools) could not be run or failed unexpectedly."""

    exit_code = EXIT_USAGE


class IndexUnreachable(ResolveError):
    """A package index or find-links location could not be reached (DNS, a refused
    connection, a timeout): the network failure the README gives exit 3, with the host named,
    not a resolver failure."""

    exit_code = EXIT_UNREACHABLE


class AttestError(PinguardError):
    """An attestation could not be made or read: a key, a statement or an envelope."""

    exit_code = EXIT_USAGE


class KeyFileError(AttestError):
    """A signing or verification key file is missing, malformed, encrypted without a
    passphrase, or not an ECDSA P-256 key."""


class EnvelopeError(AttestError):
    """A DSSE envelope or the in-toto statement inside it is malformed or does not verify."""
