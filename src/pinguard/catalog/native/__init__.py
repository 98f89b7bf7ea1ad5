"""Native code in an image, in one place: what ELF shared objects there are and what ld.so
would load for each of them.

``elf`` reads one ELF object from its stream (SONAME, NEEDED, RPATH/RUNPATH, banner,
digest); ``analyzer`` is the catalog's native analyzer (which members count as shared
objects, dpkg's file lists, ``ld.so.conf``, each library joined to its owner); ``loader`` is
glibc's search order over a state; ``preload`` what torch and CuPy load themselves on
import. The policy's rules over these facts are ``pinguard.policy.native_rules``.
"""

from __future__ import annotations

from pinguard.catalog.native.analyzer import NativeAnalyzer, NativeSession
from pinguard.catalog.native.elf import ElfFacts, ElfScanner
from pinguard.catalog.native.loader import WATCHED, FileView, LoaderConfig, resolve_state

__all__ = [
    "WATCHED",
    "ElfFacts",
    "ElfScanner",
    "FileView",
    "LoaderConfig",
    "NativeAnalyzer",
    "NativeSession",
    "resolve_state",
]
