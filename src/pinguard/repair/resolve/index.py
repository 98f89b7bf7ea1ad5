"""A small client for Python package indexes: PEP 691 JSON and PEP 503 HTML simple pages.

It lists the files a package has on one or more indexes (and ``--find-links`` directories or
pages), works out each file's version from its name, and reads a candidate's core metadata
through PEP 658/714 ``<file>.metadata`` URLs, so that no whole wheel is ever downloaded
(``--find-links`` directories are read locally). On top of that it answers the question the
constraints command asks: which versions of a package have ``Requires-Dist`` that agree with
a set of pins, newest first. Network errors become :class:`IndexFetchError` values, never crashes.
"""

from __future__ import annotations

import email.parser
import hashlib
import html.parser
import os
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import parse_tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from pinguard.errors import IndexUnreachable, ResolveError
from pinguard.models import Platform
from pinguard.target import major_minor, marker_environment, platform_machine

if TYPE_CHECKING:
    import requests

JSON_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.01"
)

if TYPE_CHECKING:
    import requests

#: The glibc minors of the manylinux targets uv's ``--python-platform`` takes (2.17, 2.28,
#: 2.31 ... 2.40); a glibc between two is resolved for the one below it, never above.
UV_MANYLINUX = (17, 28, *range(31, 41))


class IndexFetchError(ResolveError):
    """An index page or metadata file could not be fetched or parsed."""


@dataclass(frozen=True, slots=True)
class TargetEnvironment:
    """The Python the resolution is for: version (``3.11`` or ``3.11.4``) and platform."""

    python_version: str | None = None
    platform: Platform | None = None
    glibc: tuple[int, int] | None = None  # the image's glibc (major, minor), when known

    @property
    def major_minor(self) -> str | None:
        return major_minor(self.python_version) if self.python_version else None

    @property
    def python_platform(self) -> str | None:
        """uv's ``--python-platform`` for the image platform, when linux: with a known glibc
        the newest manylinux target uv knows at or below it (``x86_64-manylinux_2_36``), else
        uv's plain ``x86_64-unknown-linux-gnu`` (whose glibc is uv's own default)."""
        if self.platform is None or self.platform.os != "linux":
            return None
        machine = platform_machine(self.platform)
        if machine not in {"x86_64", "aarch64"}:
            return None
        if self.glibc is not None and self.glibc[0] == 2:
            below = [m for m in UV_MANYLINUX if m <= self.glibc[1]]
            return f"{machine}-manylinux_2_{below[-1] if below else UV_MANYLINUX[0]}"
        return f"{machine}-unknown-linux-gnu"

    def markers(self) -> dict[str, str]:
        """A PEP 508 marker environment for this target (the host's values where unknown)."""
        return marker_environment(self.python_version, self.platform)


@dataclass(frozen=True, slots=True)
class IndexFile:
    """One distribution file listed on an index page."""

    name: NormalizedName
    version: Version
    filename: str
    url: str
    requires_python: str | None = None
    yanked: bool = False
    metadata_url: str | None = None  # PEP 658/714, or a local wheel path for find-links dirs
    local_path: str | None = None
    metadata_hash: tuple[str, str] | None = None  # (algorithm, hex) when the index gives one
    hashes: tuple[tuple[str, str], ...] = ()  # the file's (algorithm, hex) as the index gives them

    @property
    def sha256(self) -> str | None:
        return dict(self.hashes).get("sha256")

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True, slots=True)
class CoreMetadata:
    """The parts of a METADATA file the resolver questions need."""

    name: NormalizedName
    version: Version
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None

    def requirements(self, target: TargetEnvironment) -> tuple[Requirement, ...]:
        """``Requires-Dist`` entries that apply to ``target`` (no extras requested)."""
        env = target.markers()
        out: list[Requirement] = []
        for raw in self.requires_dist:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            out.append(req)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One requirement of a candidate that the pins do not allow."""

    requirement: str
    pinned: str


@dataclass(frozen=True, slots=True)
class Candidate:
    """One version of a package, judged against a set of pins by its metadata."""

    name: NormalizedName
    version: Version
    requires_dist: tuple[str, ...]
    disagreements: tuple[Disagreement, ...] = ()
    metadata_source: str = ""

    @property
    def agrees(self) -> bool:
        return not self.disagreements


@dataclass(frozen=True, slots=True)
class _Anchor:
    href: str
    text: str
    attrs: dict[str, str | None] = field(default_factory=dict)


class _AnchorParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[_Anchor] = []
        self._current: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._current = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._current is not None:
            href = self._current.get("href") or ""
            self.anchors.append(_Anchor(href, "".join(self._text).strip(), self._current))
            self._current = None


def _version_of(filename: str) -> tuple[NormalizedName, Version] | None:
    try:
        if filename.endswith(".whl"):
            name, version, _build, _tags = parse_wheel_filename(filename)
            return name, version
        name, version = parse_sdist_filename(filename)
        return name, version
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _strip_fragment(url: str) -> str:
    return urllib.parse.urldefrag(url)[0]


def _fragment_hashes(url: str) -> tuple[tuple[str, str], ...]:
    """PEP 503's ``#<algorithm>=<hex>`` URL fragment as ((algorithm, hex),), or ()."""
    fragment = urllib.parse.urldefrag(url)[1]
    algo, sep, value = fragment.partition("=")
    if not sep or not value or algo.lower() not in hashlib.algorithms_guaranteed:
        return ()
    return ((algo.lower(), value.lower()),)


class SimpleIndex:
    """Reads simple indexes (``index_urls``) and find-links locations for package files."""

    def __init__(
        self,
        index_urls: Sequence[str] = (),
        find_links: Sequence[str] = (),
        *,
        session: requests.Session | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.index_urls = tuple(u if u.endswith("/") else u + "/" for u in index_urls)
        self.find_links = tuple(find_links)
        import requests  # lazy: the in-image guard (a zipapp without requests) never fetches

        self.session = session or requests.Session()
        self.timeout = timeout
        self._files: dict[NormalizedName, tuple[IndexFile, ...]] = {}
        self._metadata: dict[str, CoreMetadata] = {}
        self.fetched: list[str] = []  # every URL requested, for tests and --verbose

    # -- listing -----------------------------------------------------------------------

    def _get(self, url: str, accept: str | None = None) -> requests.Response:
        import requests

        headers = {"Accept": accept} if accept else {}
        self.fetched.append(url)
        try:
            resp = self.session.get(url, headers=headers, timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            host = urllib.parse.urlsplit(url).netloc or url
            raise IndexUnreachable(
                f"could not reach the package index {host} (fetching {url}): {type(exc).__name__}"
            ) from exc
        except requests.RequestException as exc:
            raise IndexFetchError(f"could not fetch {url!r}: {exc}") from exc
        return resp

    def _page_files(self, name: NormalizedName, page_url: str) -> list[IndexFile]:
        resp = self._get(page_url, JSON_ACCEPT)
        if resp.status_code == 404:
            return []
        if resp.status_code >= 400:
            raise IndexFetchError(f"index page {page_url!r} answered HTTP {resp.status_code}")
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip()
        base = resp.url or page_url
        if ctype in {"application/vnd.pypi.simple.v1+json", "application/json"}:
            return self._json_files(name, base, resp.json())
        return self._html_files(name, base, resp.text)

    def _json_files(self, name: NormalizedName, base: str, data: dict[str, Any]) -> list[IndexFile]:
        out: list[IndexFile] = []
        for entry in data.get("files", []):
            filename = str(entry.get("filename", ""))
            parsed = _version_of(filename)
            if parsed is None or parsed[0] != name:
                continue
            url = urllib.parse.urljoin(base, str(entry.get("url", "")))
            meta = entry.get("core-metadata", entry.get("dist-info-metadata", False))
            meta_hash: tuple[str, str] | None = None
            if isinstance(meta, dict) and meta:
                algo = sorted(meta)[0]
                meta_hash = (algo, str(meta[algo]))
            yanked = entry.get("yanked", False)
            given = entry.get("hashes")
            hashes = (
                tuple(sorted((str(k).lower(), str(v).lower()) for k, v in given.items()))
                if isinstance(given, dict)
                else _fragment_hashes(url)
            )
            out.append(
                IndexFile(
                    name=name,
                    version=parsed[1],
                    filename=filename,
                    url=_strip_fragment(url),
                    requires_python=entry.get("requires-python") or None,
                    yanked=bool(yanked),
                    metadata_url=_strip_fragment(url) + ".metadata" if meta else None,
                    metadata_hash=meta_hash,
                    hashes=hashes,
                )
            )
        return out

    def _html_files(self, name: NormalizedName, base: str, text: str) -> list[IndexFile]:
        parser = _AnchorParser()
        parser.feed(text)
        out: list[IndexFile] = []
        for anchor in parser.anchors:
            url = urllib.parse.urljoin(base, anchor.href)
            filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
            parsed = _version_of(filename)
            if parsed is None or parsed[0] != name:
                continue
            meta = anchor.attrs.get(
                "data-core-metadata", anchor.attrs.get("data-dist-info-metadata")
            )
            meta_hash = None
            if meta and "=" in meta:
                algo, _, value = meta.partition("=")
                meta_hash = (algo, value)
            out.append(
                IndexFile(
                    name=name,
                    version=parsed[1],
                    filename=filename,
                    url=_strip_fragment(url),
                    requires_python=anchor.attrs.get("data-requires-python") or None,
                    yanked="data-yanked" in anchor.attrs,
                    metadata_url=_strip_fragment(url) + ".metadata" if meta is not None else None,
                    metadata_hash=meta_hash,
                    hashes=_fragment_hashes(url),
                )
            )
        return out

    def _find_links_files(self, name: NormalizedName, location: str) -> list[IndexFile]:
        path = Path(location[7:] if location.startswith("file://") else location)
        if "://" not in location or location.startswith("file://"):
            if not path.is_dir():
                return []
            out: list[IndexFile] = []
            for entry in sorted(os.listdir(path)):
                parsed = _version_of(entry)
                if parsed is None or parsed[0] != name:
                    continue
                full = path / entry
                out.append(
                    IndexFile(
                        name=name,
                        version=parsed[1],
                        filename=entry,
                        url=full.as_uri(),
                        local_path=str(full),
                    )
                )
            return out
        resp = self._get(location)
        if resp.status_code >= 400:
            raise IndexFetchError(f"find-links page {location!r} answered HTTP {resp.status_code}")
        return self._html_files(name, resp.url or location, resp.text)

    def files(self, name: str) -> tuple[IndexFile, ...]:
        """Every file of ``name`` on every index and find-links location (cached)."""
        key = canonicalize_name(name)
        if key not in self._files:
            found: list[IndexFile] = []
            for base in self.index_urls:
                found.extend(self._page_files(key, urllib.parse.urljoin(base, f"{key}/")))
            for location in self.find_links:
                found.extend(self._find_links_files(key, location))
            self._files[key] = tuple(found)
        return self._files[key]

    def versions(self, name: str, *, include_yanked: bool = False) -> tuple[Version, ...]:
        """The distinct versions of ``name``, newest first."""
        vs = {f.version for f in self.files(name) if include_yanked or not f.yanked}
        return tuple(sorted(vs, reverse=True))

    # -- metadata ----------------------------------------------------------------------

    def metadata(self, file: IndexFile) -> CoreMetadata:
        """Core metadata of one file: PEP 658 for index files, the zip for local wheels."""
        key = file.metadata_url or file.local_path or file.url
        if key in self._metadata:
            return self._metadata[key]
        if file.local_path and file.is_wheel:
            raw = _wheel_metadata(Path(file.local_path))
        elif file.metadata_url:
            resp = self._get(file.metadata_url)
            if resp.status_code >= 400:
                raise IndexFetchError(
                    f"metadata {file.metadata_url!r} answered HTTP {resp.status_code}"
                )
            raw = resp.content
            if file.metadata_hash is not None:
                algo, expected = file.metadata_hash
                try:
                    actual = hashlib.new(algo, raw).hexdigest()
                except ValueError:
                    actual = expected
                if actual != expected:
                    raise IndexFetchError(
                        f"metadata {file.metadata_url!r} does not match its {algo}"
                    )
        else:
            raise IndexFetchError(
                f"{file.filename!r} has no PEP 658 metadata on the index; "
                "pinguard does not download whole wheels to read it"
            )
        meta = parse_metadata(raw)
        self._metadata[key] = meta
        return meta

    def best_file(
        self, name: str, version: Version, target: TargetEnvironment, *, prefer_last: bool = False
    ) -> IndexFile | None:
        """The file of ``name==version`` whose metadata is most likely to apply to ``target``:
        a compatible wheel with metadata, else any wheel with metadata, else any wheel; among
        equals the first index's, or with ``prefer_last`` the last one's (pip's resolver
        walks its sorted candidates from the end, so of one file on several indexes it
        installs the last index's)."""
        files = [f for f in self.files(name) if f.version == version and f.is_wheel]
        if prefer_last:
            files.reverse()

        def score(f: IndexFile) -> tuple[int, int, str]:
            has_meta = 1 if (f.metadata_url or f.local_path) else 0
            return (has_meta, _wheel_fits(f.filename, target), f.filename)

        files.sort(key=score, reverse=True)
        return files[0] if files else None

    def candidates(
        self,
        name: str,
        pins: Mapping[NormalizedName, SpecifierSet],
        target: TargetEnvironment,
        *,
        prereleases: bool = True,
        limit: int = 3,
        scan: int = 25,
        exclude: Iterable[Version] = (),
    ) -> tuple[Candidate, ...]:
        """Newest versions of ``name`` (at most ``limit``) whose metadata agrees with ``pins``.

        A requirement agrees when the pinned version satisfies it (for ``==`` pins), or when
        some version on the index satisfies both the requirement and a range pin. At most
        ``scan`` versions are examined, newest first.
        """
        skip = set(exclude)
        agreeing: list[Candidate] = []
        examined = 0
        for version in self.versions(name):
            if version in skip or (version.is_prerelease and not prereleases):
                continue
            if examined >= scan or len(agreeing) >= limit:
                break
            examined += 1
            cand = self.judge(name, version, pins, target)
            if cand is not None and cand.agrees:
                agreeing.append(cand)
        return tuple(agreeing)

    def judge(
        self,
        name: str,
        version: Version,
        pins: Mapping[NormalizedName, SpecifierSet],
        target: TargetEnvironment,
    ) -> Candidate | None:
        """Check one version's metadata against ``pins``; None when it cannot be read."""
        file = self.best_file(name, version, target)
        if file is None:
            return None
        try:
            meta = self.metadata(file)
        except IndexFetchError:
            return None
        mm = target.major_minor
        if meta.requires_python and mm:
            try:
                if not SpecifierSet(meta.requires_python).contains(
                    Version(target.python_version or mm), prereleases=True
                ):
                    return None
            except InvalidSpecifier:
                pass
        bad: list[Disagreement] = []
        for req in meta.requirements(target):
            pin = pins.get(canonicalize_name(req.name))
            if pin is None:
                continue
            if not self._agrees(req, pin):
                bad.append(Disagreement(str(req), f"{canonicalize_name(req.name)}{pin}"))
        return Candidate(
            name=canonicalize_name(name),
            version=version,
            requires_dist=meta.requires_dist,
            disagreements=tuple(bad),
            metadata_source=file.metadata_url or file.local_path or "",
        )

    def _agrees(self, req: Requirement, pin: SpecifierSet) -> bool:
        exact = pinned_version(pin)
        if exact is not None:
            return req.specifier.contains(exact, prereleases=True)
        try:
            versions = self.versions(req.name)
        except IndexFetchError:
            return True  # cannot refute a range without the index: do not reject
        return any(
            req.specifier.contains(v, prereleases=True) and pin.contains(v, prereleases=True)
            for v in versions
        )


def pinned_version(spec: SpecifierSet) -> Version | None:
    """The single version an ``==``/``===`` specifier set allows, else None."""
    for s in spec:
        if s.operator in {"==", "==="} and "*" not in s.version:
            try:
                return Version(s.version)
            except ValueError:
                return None
    return None


def parse_metadata(raw: bytes) -> CoreMetadata:
    """Parse a METADATA / PKG-INFO file (RFC 822 style) into :class:`CoreMetadata`."""
    msg = email.parser.BytesParser().parsebytes(raw, headersonly=True)
    name = msg.get("Name")
    version = msg.get("Version")
    if not name or not version:
        raise IndexFetchError("metadata has no Name or Version")
    try:
        parsed = Version(str(version))
    except ValueError as exc:
        raise IndexFetchError(f"metadata has an invalid version {version!r}") from exc
    return CoreMetadata(
        name=canonicalize_name(str(name)),
        version=parsed,
        requires_dist=tuple(str(v) for v in (msg.get_all("Requires-Dist") or [])),
        requires_python=str(msg["Requires-Python"]) if msg.get("Requires-Python") else None,
    )


def _wheel_metadata(path: Path) -> bytes:
    try:
        with zipfile.ZipFile(path) as zf:
            names = [
                n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            ]
            if not names:
                raise IndexFetchError(f"{path.name!r} holds no dist-info METADATA")
            return zf.read(names[0])
    except (OSError, zipfile.BadZipFile) as exc:
        raise IndexFetchError(f"could not read {str(path)!r}: {exc}") from exc


def _wheel_fits(filename: str, target: TargetEnvironment) -> int:
    """2 when the wheel's tags plainly fit ``target``, 1 for pure-Python, 0 otherwise."""
    try:
        _n, _v, _b, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return 0
    machine = platform_machine(target.platform) if target.platform else None
    mm = (target.major_minor or "").replace(".", "")
    best = 0
    for tag in tags:
        for t in parse_tag(str(tag)):
            if t.platform == "any":
                best = max(best, 1)
            elif (
                machine
                and machine in t.platform
                and "linux" in t.platform
                and "musllinux" not in t.platform  # images are glibc unless shown otherwise
                and t.interpreter.startswith(("cp", "py"))
                and (
                    not mm
                    or t.interpreter.endswith(mm)
                    or t.abi in {"abi3", "none"}
                    or t.interpreter in {"py3", f"py{mm}"}
                )
            ):
                best = 2
    return best
