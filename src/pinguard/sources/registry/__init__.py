"""The registry client (``docker://``, the OCI distribution API v2), one module per concern:
``client`` (the transport), ``auth`` (credentials and challenges), ``pull``
(``RegistrySource``), ``push``, ``ranges``, ``referrers`` and ``tags``. Code outside
``pinguard.sources`` imports these names from here, never the modules themselves.
"""

from pinguard.sources.registry.auth import (
    Credentials,
    RegistryAuth,
    lookup_credentials,
    parse_www_authenticate,
)
from pinguard.sources.registry.client import (
    TRANSPORT_ERRORS,
    RegistryClient,
    RegistryUnreachable,
    transport_reason,
)
from pinguard.sources.registry.pull import RegistrySource
from pinguard.sources.registry.push import has_blob, push_blob, push_manifest, referrers_page
from pinguard.sources.registry.ranges import RangeFetcher, RangesRefused
from pinguard.sources.registry.referrers import (
    EMPTY_BLOB,
    EMPTY_DIGEST,
    Attached,
    Descriptor,
    Referrers,
    attach,
    canonical,
    list_referrers,
    subject_descriptor,
)
from pinguard.sources.registry.tags import list_tags

__all__ = [
    "EMPTY_BLOB",
    "EMPTY_DIGEST",
    "TRANSPORT_ERRORS",
    "Attached",
    "Credentials",
    "Descriptor",
    "RangeFetcher",
    "RangesRefused",
    "Referrers",
    "RegistryAuth",
    "RegistryClient",
    "RegistrySource",
    "RegistryUnreachable",
    "attach",
    "canonical",
    "has_blob",
    "list_referrers",
    "list_tags",
    "lookup_credentials",
    "parse_www_authenticate",
    "push_blob",
    "push_manifest",
    "referrers_page",
    "subject_descriptor",
    "transport_reason",
]
