"""Symbolic links resolved inside an image's root, as the kernel resolves them under chroot.

This module is the one home of path resolution through links: ``resolve(path, links)``
follows every component of an absolute path through ``links`` (path -> target as stored in
the layer: relative to the link's directory, or absolute, meaning the image's root). ``..``
is taken after each link, on the directory reached, and stops at the root, so no link
escapes the image (``../../../../..`` from ``/usr/lib`` is ``/``), the way a chroot and
containerd's ``fs.RootPath`` clamp it. At most ``MAX_LINKS`` (40, the kernel's ``ELOOP``
limit) links are followed; a loop gives None. ``resolve_parent`` resolves only the directory
part: where a layer member lands when it is written, since the member itself replaces what
was at its last component. Nothing here knows what the paths hold.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

MAX_LINKS = 40  # as the kernel's symlink limit (ELOOP)


def resolve(path: str, links: Mapping[str, str]) -> str | None:
    """``path`` with every link in it followed inside the root (None on a loop)."""
    parts = [p for p in path.split("/") if p]
    parts.reverse()  # a stack: the next component is at the end
    done = "/"
    hops = 0
    while parts:
        part = parts.pop()
        if part == "..":
            done = posixpath.dirname(done) or "/"
            continue
        if part == ".":
            continue
        nxt = done + part if done == "/" else done + "/" + part
        target = links.get(nxt)
        if target is None:
            done = nxt
            continue
        hops += 1
        if hops > MAX_LINKS:
            return None
        parts.extend(reversed([p for p in target.split("/") if p]))
        if target.startswith("/"):
            done = "/"
    return done


def resolve_parent(
    path: str, links: Mapping[str, str], memo: dict[str, str | None] | None = None
) -> str | None:
    """``path`` with the links in its directory part followed (None on a loop).

    ``memo`` (directory -> resolved) spares resolving one directory again for each of its
    members; it is only valid while ``links`` stays as it was."""
    if not links:
        return path
    parent, base = posixpath.split(path)
    if memo is None:
        real = resolve(parent, links)
    elif parent in memo:
        real = memo[parent]
    else:
        real = memo[parent] = resolve(parent, links)
    if real is None:
        return None
    if not base:
        return real
    return real + base if real == "/" else real + "/" + base
