"""Post-state hooks: work over a whole state once every analyzer has contributed to it.

An analyzer sees the files it asked for; some facts need the whole state and the image
around it (which file ld.so would load for each NEEDED needs the ELF facts, the loader
configuration files, whether dpkg's database exists and the image's environment). A hook
takes the snapshot the catalog made of a state, the one before it, the layer that made it,
the paths that layer streamed, the state itself and the image's facts, and returns the
snapshot completed (trivy's post-analyzers play this part). ``POST_STATE`` lists them in
order; the pipeline runs them without knowing any analyzer. The native loader is the one
hook today.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pinguard.audit.state import State
from pinguard.catalog import dpkg
from pinguard.catalog.native import analyzer as native
from pinguard.catalog.native.loader import LoaderConfig, attach_native, image_env
from pinguard.models import Snapshot
from pinguard.sources.interface import ResolvedImage
from pinguard.target import platform_machine


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """What hooks may know of the image beyond its states: its environment and machine."""

    env: tuple[str, ...]  # the image config's Env, KEY=value strings
    machine: str

    @classmethod
    def of(cls, resolved: ResolvedImage) -> ImageFacts:
        machine = platform_machine(resolved.platform) if resolved.platform is not None else "x86_64"
        return cls(image_env(resolved.config), machine)


#: One hook: (snapshot, the one before, layer digest, paths the layer streamed, the state,
#: the image's facts) -> the snapshot completed with what it finds.
PostStateHook = Callable[[Snapshot, Snapshot, str, Iterable[str], State, ImageFacts], Snapshot]


def native_loader(
    snap: Snapshot,
    previous: Snapshot,
    layer: str,
    streamed: Iterable[str],
    state: State,
    image: ImageFacts,
) -> Snapshot:
    """Where ld.so finds each NEEDED of the state's shared objects (``catalog.native.loader``)."""
    if not (snap.native or previous.native):
        return snap
    loader = LoaderConfig.of(
        image.env,
        native.parse_ld_so_conf(state.files),
        machine=image.machine,
        debian=dpkg.STATUS in state.files,
    )
    return attach_native(
        snap, previous, layer, streamed, native.state_view(state), loader, state.files
    )


#: Every post-state hook, in the order they run.
POST_STATE: tuple[PostStateHook, ...] = (native_loader,)
