"""The state a predicted stage starts from: its ``FROM`` image, audited, and what its config sets.

A ``FROM`` name is read the way the builder finds it (`base_reference`): a ``localhost/...``
name from the local containers-storage, where buildah and podman keep the images they build
or import, any other name from its registry (``docker://NAME``); a name the user maps with
``--base NAME=REF`` (or a lone ``--base REF`` for the one base image) is read from that
reference instead. `read_base` runs the normal audit over it (the layer and replay caches
included) and keeps what the image config says that a build inherits: its ``Env`` (``PATH``,
``PIP_*``, ``VIRTUAL_ENV``), ``WorkingDir`` and ``User``. ``FROM scratch`` is the empty state
(`scratch_base`), and so is a base that cannot be read when the user asks to start empty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_source
from pinguard.audit.workers import Progress
from pinguard.errors import UsageError
from pinguard.models import AuditResult, ImageInfo, Platform, Snapshot
from pinguard.sources.interface import ImageSource, ResolvedImage, WrappedSource
from pinguard.sources.reference import registry_reference

SCRATCH = "scratch"
#: The PATH a container gets when its image sets none (Docker's and buildah's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class BaseImage:
    """A stage's starting point: the audit of its ``FROM`` image and its inherited config."""

    name: str  # as the FROM line names it (after ARG expansion)
    reference: str  # what pinguard read ("" for scratch and an empty start)
    result: AuditResult
    env: tuple[tuple[str, str], ...] = ()  # the config's Env, in order
    workdir: str = "/"
    user: str = ""
    onbuild: tuple[str, ...] = ()
    note: str = ""  # how the state was obtained, for the report's notes

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)


def base_reference(name: str, bases: Mapping[str, str]) -> str:
    """The reference pinguard reads the ``FROM`` image ``name`` by: the user's mapping, else
    containers-storage for ``localhost/...`` names, else the registry."""
    if name in bases:
        return bases[name]
    if name.startswith("localhost/"):
        return f"containers-storage:{name}"
    return registry_reference(name)


def base_mapping(values: Sequence[str], external: Sequence[str]) -> dict[str, str]:
    """``--base NAME=REF`` (repeatable) as a mapping; a lone ``--base REF`` names the base of
    the one ``FROM`` image the build uses (``external``: those names, in order)."""
    distinct = list(dict.fromkeys(external))
    out: dict[str, str] = {}
    for value in values:
        name, eq, ref = value.partition("=")
        if eq and name in distinct:
            out[name] = ref
            continue
        if len(distinct) != 1:
            known = ", ".join(distinct) or "none: FROM scratch or earlier stages only"
            raise UsageError(
                f"--base {value}: name the FROM image it replaces as --base NAME=REF (the "
                f"Dockerfile builds from: {known})"
            )
        out[distinct[0]] = value
    return out


def scratch_base(name: str, platform: Platform | None, note: str) -> BaseImage:
    """The empty state: ``FROM scratch``, or a base read as empty on request."""
    empty = AuditResult(
        image=ImageInfo(reference=name, manifest_digest=None, platform=platform),
        steps=(),
        final=Snapshot(),
    )
    return BaseImage(name=name, reference="", result=empty, note=note)


class _Recording(WrappedSource):
    """Another source whose resolved image (and so its config) is kept once resolved."""

    def __init__(self, inner: ImageSource) -> None:
        super().__init__(inner)
        self.resolved: ResolvedImage | None = None

    def resolve(self) -> ResolvedImage:
        if self.resolved is None:
            self.resolved = self.inner.resolve()
        return self.resolved


def _env_pairs(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in config.get("Env") or ():
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            pairs.append((key, value))
    return tuple(pairs)


def read_base(
    name: str,
    reference: str,
    options: AuditOptions,
    progress: Progress | None = None,
) -> BaseImage:
    """Audit ``reference`` (the ``FROM`` image ``name``) and read its config; a
    ``SourceError`` from the audit propagates (the caller says which line needed it)."""
    from pinguard.sources import open_source

    source = _Recording(open_source(reference, options.source))
    result = audit_source(source, options, progress)
    resolved = source.resolved
    config: Mapping[str, Any] = (resolved.config.get("config") or {}) if resolved else {}
    onbuild = tuple(str(x) for x in config.get("OnBuild") or ())
    digest = result.image.manifest_digest or "no digest"
    return BaseImage(
        name=name,
        reference=reference,
        result=result,
        env=_env_pairs(config),
        workdir=str(config.get("WorkingDir") or "/"),
        user=str(config.get("User") or ""),
        onbuild=onbuild,
        note=f"FROM {name}: audited {reference} ({digest}, {len(result.steps)} steps)",
    )


def with_platform(base: BaseImage, platform: Platform | None) -> BaseImage:
    """``base`` with its result's platform set when the audit did not know it."""
    if base.result.image.platform is not None or platform is None:
        return base
    image = dataclasses.replace(base.result.image, platform=platform)
    return dataclasses.replace(base, result=dataclasses.replace(base.result, image=image))
