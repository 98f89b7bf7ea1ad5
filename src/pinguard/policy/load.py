"""Read policy files: TOML parsing, validation with file and line, ``extend``, discovery.

A policy file is parsed by tomlkit and located line by line (``locate``), then every value
is checked and converted at this boundary: names are canonicalized, versions and ranges
become ``SpecifierSet``s, markers ``Marker``s, severities ``Severity``. Every problem in a
file is collected as a ``PolicyProblem`` (file, line, message quoting the bad value with
``!r``) and raised together as one ``PolicyError`` (a ``ConfigError``). ``extend`` names
other files relative to the extending one, or a built-in policy by name
(``builtin:default``, shipped as package data in ``pinguard/policy/builtin/``, so it is
found from any directory and from an installed wheel); they are loaded first (depth first,
each once) and cycles are errors. A file that cannot be read at all is a problem without a
line (``cannot read 'x.toml': ...``). Later files override earlier ones in ``require_guard``
and key by key in ``[rules.*]``, while ``[[pin]]``, ``[[forbidden]]``, ``[[coupling]]``,
``[[native-pin]]`` and ``[[waiver]]`` entries accumulate. ``discover`` (``discovery.py``) finds
``pinguard.toml`` or a ``[tool.pinguard]`` table in ``pyproject.toml`` from a directory upwards;
``load_run_policy`` is what every command loads (the given files, else the discovered one,
else the built-in default).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TypedDict, TypeVar

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidName, NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.errors import ConfigError
from pinguard.models import Severity
from pinguard.policy.discovery import discover
from pinguard.policy.locate import Lines, locate_lines
from pinguard.policy.locate import Path as KeyPath
from pinguard.policy.model import (
    CONFIGURABLE_RULES,
    RULES,
    Coupling,
    Forbidden,
    NativePin,
    Origin,
    Pin,
    Policy,
    Scope,
    Waiver,
    default_policy,
    default_rules,
    inventory_policy,
)

PYPROJECT_PREFIX: KeyPath = ("tool", "pinguard")

# A TOML table as tomlkit unwraps it; values are checked before they are used.
TomlTable = dict[str, object]

_SCOPE_KEYS = ("environments", "platforms", "targets", "marker")
_TOP_KEYS = (
    "extend",
    "name",
    "description",
    "require_guard",
    "rules",
    "pin",
    "forbidden",
    "coupling",
    "waiver",
    "native-pin",
)
_RULE_KEYS = ("severity", "enabled", *_SCOPE_KEYS)
_RULE_EXTRA = {"downgrade": ("allow", "packages")}
_PIN_KEYS = ("package", "version", "reason", "link", "severity", *_SCOPE_KEYS)
_COUPLING_KEYS = ("package", "version", "requires", "reason", "link", "severity", *_SCOPE_KEYS)
_NATIVE_PIN_KEYS = ("soname", "version", "consumer", "reason", "link", "severity", *_SCOPE_KEYS)
_WAIVER_KEYS = ("package", "rule", "reason", "expires", "environments")
_SEVERITIES = tuple(s.value for s in Severity)
# ``--policy none``: no policy at all, an inventory (see ``load_run_policy``)
NO_POLICY = "none"
# ``extend = ["builtin:default"]``, ``--policy builtin:default``: a policy shipped in the package
BUILTIN_PREFIX = "builtin:"


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One thing wrong in a policy file; ``unreadable``: the file as a whole could not be
    read (no line to point at; the message names the file)."""

    file: str
    line: int
    message: str
    unreadable: bool = False

    def __str__(self) -> str:
        return self.message if self.unreadable else f"{self.file}:{self.line}: {self.message}"


def builtin_policies() -> tuple[str, ...]:
    """The names of the built-in policies (``default``), sorted."""
    root = resources.files("pinguard.policy").joinpath("builtin")
    return tuple(
        sorted(e.name[: -len(".toml")] for e in root.iterdir() if e.name.endswith(".toml"))
    )


def _builtin(ref: str) -> tuple[str, bytes] | None:
    """``builtin:NAME`` -> (the name it is reported under, its bytes); None: no such policy.
    The name is the packaged file's path where it is a file on disk (so the attestation
    reads the very file), else ``builtin:NAME`` (a zipapp)."""
    name = ref[len(BUILTIN_PREFIX) :]
    if name not in builtin_policies():
        return None
    entry = resources.files("pinguard.policy").joinpath("builtin").joinpath(f"{name}.toml")
    label = str(entry) if isinstance(entry, Path) else ref
    return label, entry.read_bytes()


class PolicyError(ConfigError):
    """One or more policy files are invalid; ``problems`` lists each with file and line."""

    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class _ScopeFields(TypedDict, total=False):
    """The scope keys an entry or rule table sets, converted."""

    environments: tuple[str, ...]
    platforms: tuple[str, ...]
    targets: tuple[str, ...]
    marker: Marker | None


class _RuleFields(TypedDict, total=False):
    """The other keys a ``[rules.<rule>]`` table sets, converted."""

    severity: Severity
    enabled: bool
    allow: frozenset[NormalizedName]
    packages: frozenset[NormalizedName]


@dataclass(slots=True)
class _Layer:
    """What one file says, before merging."""

    file: str
    extends: list[tuple[str, int]] = field(default_factory=list)
    rules: dict[str, tuple[_RuleFields, _ScopeFields, Origin]] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)
    forbidden: list[Forbidden] = field(default_factory=list)
    couplings: list[Coupling] = field(default_factory=list)
    waivers: list[Waiver] = field(default_factory=list)
    native_pins: list[NativePin] = field(default_factory=list)
    require_guard: bool | None = None
    digest: str = ""  # "sha256:<hex>" of the file's bytes


class _Missing:
    pass


_T = TypeVar("_T")


_MISSING = _Missing()


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


class _Reader:
    """Checks and converts values, recording problems with their lines."""

    def __init__(self, file: str, lines: Lines, prefix: KeyPath) -> None:
        self.file = file
        self.lines = lines
        self.prefix = prefix
        self.problems: list[PolicyProblem] = []

    def line(self, path: KeyPath) -> int:
        return self.lines.of((*self.prefix, *path))

    def origin(self, path: KeyPath) -> Origin:
        return Origin(self.file, self.line(path))

    def problem(self, path: KeyPath, message: str) -> None:
        self.problems.append(PolicyProblem(self.file, self.line(path), message))

    @staticmethod
    def dotted(path: KeyPath) -> str:
        out = ""
        for part in path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    # -- structure -------------------------------------------------------------------
    def table(
        self, value: object, path: KeyPath, allowed: Iterable[str], required: Iterable[str] = ()
    ) -> TomlTable | None:
        if not isinstance(value, dict):
            self.problem(path, f"{self.dotted(path)}: expected a table, got {value!r}")
            return None
        allowed = tuple(allowed)
        for key in value:
            if key not in allowed:
                self.problem(
                    (*path, key),
                    f"{self.dotted(path) or 'top level'}: unknown key {key!r} "
                    f"(expected one of: {', '.join(allowed)})",
                )
        for key in required:
            if key not in value:
                self.problem(path, f"{self.dotted(path)}: missing required key {key!r}")
        return value

    def entries(self, data: TomlTable, key: str) -> list[tuple[KeyPath, object]]:
        value = data.get(key, [])
        if isinstance(value, dict):  # a single [key] table is accepted as one entry
            return [((key,), value)]
        if not isinstance(value, list):
            self.problem((key,), f"{key}: expected an array of tables ([[{key}]]), got {value!r}")
            return []
        return [((key, i), item) for i, item in enumerate(value)]

    # -- scalars ---------------------------------------------------------------------
    def scalar(
        self, data: TomlTable, path: KeyPath, key: str, kind: type[_T], expected: str
    ) -> _T | _Missing:
        """``data[key]`` when it is a ``kind``; missing or wrong (a problem): ``_MISSING``."""
        value = data.get(key, _MISSING)
        if value is _MISSING or isinstance(value, kind):
            return value
        self.problem(
            (*path, key),
            f"{self.dotted((*path, key))}: expected {expected}, got {_type_name(value)} {value!r}",
        )
        return _MISSING

    def string(
        self, data: TomlTable, path: KeyPath, key: str, default: str | None = None
    ) -> str | None:
        value = self.scalar(data, path, key, str, "a string")
        return default if isinstance(value, _Missing) else value

    def boolean(self, data: TomlTable, path: KeyPath, key: str) -> bool | None:
        value = self.scalar(data, path, key, bool, "true or false")
        return None if isinstance(value, _Missing) else value

    def strings(self, data: TomlTable, path: KeyPath, key: str) -> tuple[str, ...] | None:
        value = data.get(key, _MISSING)
        if value is _MISSING:
            return None
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        self.problem(
            (*path, key),
            f"{self.dotted((*path, key))}: expected a string or an array of strings, got {value!r}",
        )
        return None

    def name(self, raw: str, path: KeyPath) -> NormalizedName | None:
        try:
            return canonicalize_name(raw, validate=True)
        except InvalidName:
            self.problem(path, f"{self.dotted(path)}: invalid package name {raw!r}")
            return None

    def names(self, data: TomlTable, path: KeyPath, key: str) -> frozenset[NormalizedName] | None:
        raw = self.strings(data, path, key)
        if raw is None:
            return None
        out = [self.name(r, (*path, key)) for r in raw]
        return frozenset(n for n in out if n is not None)

    def severity(self, data: TomlTable, path: KeyPath) -> Severity | None:
        raw = self.string(data, path, "severity")
        if raw is None:
            return None
        if raw not in _SEVERITIES:
            self.problem(
                (*path, "severity"),
                f"{self.dotted((*path, 'severity'))}: invalid "
                f"severity {raw!r} (expected one of: {', '.join(_SEVERITIES)})",
            )
            return None
        return Severity(raw)

    def specifier(self, data: TomlTable, path: KeyPath, key: str) -> SpecifierSet | None:
        raw = self.string(data, path, key)
        if raw is None:
            return None
        return self.parse_specifier(raw.strip(), (*path, key))

    def parse_specifier(self, raw: str, path: KeyPath) -> SpecifierSet | None:
        try:
            if raw[:1].isdigit():
                return SpecifierSet(f"=={Version(raw)}")
            spec = SpecifierSet(raw)
        except (InvalidSpecifier, InvalidVersion):
            spec = None
        # packaging 26 parses "===" (arbitrary equality with nothing) without complaint
        if spec is None or not raw or any(not s.version.strip() for s in spec):
            self.problem(path, f"{self.dotted(path)}: invalid version or specifier {raw!r}")
            return None
        return spec

    def marker(self, data: TomlTable, path: KeyPath) -> Marker | None:
        raw = self.string(data, path, "marker")
        if raw is None:
            return None
        try:
            return Marker(raw)
        except InvalidMarker:
            self.problem(
                (*path, "marker"), f"{self.dotted((*path, 'marker'))}: invalid marker {raw!r}"
            )
            return None

    def scope_fields(self, data: TomlTable, path: KeyPath) -> _ScopeFields:
        """The scope keys present in ``data``, converted (absent keys are left out)."""
        out: _ScopeFields = {}
        environments = self.strings(data, path, "environments")
        if environments is not None:
            out["environments"] = environments
        targets = self.strings(data, path, "targets")
        if targets is not None:
            out["targets"] = targets
        platforms = self.strings(data, path, "platforms")
        if platforms is not None:
            for p in platforms:
                parts = p.split("/")
                if not 2 <= len(parts) <= 3 or not all(parts):
                    self.problem(
                        (*path, "platforms"),
                        f"{self.dotted((*path, 'platforms'))}: "
                        f"invalid platform {p!r} (expected os/arch[/variant])",
                    )
            out["platforms"] = platforms
        if "marker" in data:
            out["marker"] = self.marker(data, path)
        return out

    def scope(self, data: TomlTable, path: KeyPath) -> Scope:
        return Scope(**self.scope_fields(data, path))

    def package(self, data: TomlTable, path: KeyPath) -> NormalizedName | None:
        """The entry's ``package``, canonicalized (None when missing or invalid)."""
        raw = self.string(data, path, "package")
        return self.name(raw, (*path, "package")) if raw is not None else None

    def entry(
        self, data: TomlTable, path: KeyPath
    ) -> tuple[NormalizedName | None, SpecifierSet | None, Severity | None, Scope]:
        """What ``[[pin]]`` and ``[[forbidden]]`` share: package, version, severity, scope."""
        pkg = self.package(data, path)
        spec = self.specifier(data, path, "version")
        return pkg, spec, self.severity(data, path), self.scope(data, path)


def _parse(file: str, text: str, prefix: KeyPath | None) -> tuple[_Layer, list[PolicyProblem]]:
    """Parse one file's text into a layer; ``prefix`` None means pinguard.toml syntax."""
    import tomlkit  # here: the built-in default policy (no file) needs no TOML parser
    import tomlkit.exceptions

    try:
        doc = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        return _Layer(file), [PolicyProblem(file, exc.line, f"invalid TOML: {exc}")]
    except tomlkit.exceptions.TOMLKitError as exc:  # KeyAlreadyPresent etc. carry no line
        return _Layer(file), [PolicyProblem(file, 1, f"invalid TOML: {exc}")]
    lines = locate_lines(text)
    reader = _Reader(file, lines, prefix or ())
    data: object = doc
    for part in prefix or ():
        data = data.get(part, {}) if isinstance(data, dict) else {}
    layer = _Layer(file)
    top = reader.table(data, (), _TOP_KEYS)
    if top is None:
        return layer, reader.problems
    reader.string(top, (), "name")
    reader.string(top, (), "description")
    layer.require_guard = reader.boolean(top, (), "require_guard")
    for ref in reader.strings(top, (), "extend") or ():
        layer.extends.append((ref, reader.line(("extend",))))

    rules = reader.table(top.get("rules", {}), ("rules",), CONFIGURABLE_RULES)
    if rules is not None:
        for rule_id, value in rules.items():
            if rule_id not in RULES or not RULES[rule_id].configurable:
                continue
            path: KeyPath = ("rules", rule_id)
            allowed = _RULE_KEYS + _RULE_EXTRA.get(rule_id, ())
            body = reader.table(value, path, allowed)
            if body is None:
                continue
            fields: _RuleFields = {}
            sev = reader.severity(body, path)
            if sev is not None:
                fields["severity"] = sev
            enabled = reader.boolean(body, path, "enabled")
            if enabled is not None:
                fields["enabled"] = enabled
            scoped = reader.scope_fields(body, path)
            extra = _RULE_EXTRA.get(rule_id, ())
            allow = reader.names(body, path, "allow") if "allow" in extra else None
            if allow is not None:
                fields["allow"] = allow
            packages = reader.names(body, path, "packages") if "packages" in extra else None
            if packages is not None:
                fields["packages"] = packages
            layer.rules[rule_id] = (fields, scoped, reader.origin(path))

    for path, value in reader.entries(top, "pin"):
        body = reader.table(value, path, _PIN_KEYS, ("package", "version"))
        if body is None:
            continue
        pkg, spec, sev, scope = reader.entry(body, path)
        reason = reader.string(body, path, "reason", "") or ""
        link = reader.string(body, path, "link", "") or ""
        if pkg is not None and spec is not None:
            layer.pins.append(Pin(pkg, spec, reason, link, sev, scope, reader.origin(path)))

    for path, value in reader.entries(top, "forbidden"):
        body = reader.table(value, path, _PIN_KEYS, ("package", "version", "reason"))
        if body is None:
            continue
        pkg, spec, sev, scope = reader.entry(body, path)
        why = reader.string(body, path, "reason")
        link = reader.string(body, path, "link", "") or ""
        if pkg is not None and spec is not None and why is not None:
            layer.forbidden.append(Forbidden(pkg, spec, why, link, sev, scope, reader.origin(path)))

    for path, value in reader.entries(top, "coupling"):
        body = reader.table(value, path, _COUPLING_KEYS, ("package", "version", "requires"))
        if body is None:
            continue
        pkg = reader.package(body, path)
        spec = reader.specifier(body, path, "version")
        raw_req = reader.string(body, path, "requires")
        req: Requirement | None = None
        if raw_req is not None:
            try:
                req = Requirement(raw_req)
                if req.url or req.marker or req.extras:
                    raise InvalidRequirement("only a name and a version range are allowed")
            except InvalidRequirement:
                reader.problem(
                    (*path, "requires"),
                    f"{reader.dotted((*path, 'requires'))}: "
                    f"invalid requirement {raw_req!r} (expected 'name<range>')",
                )
                req = None
        sev, scope = reader.severity(body, path), reader.scope(body, path)
        reason = reader.string(body, path, "reason", "") or ""
        link = reader.string(body, path, "link", "") or ""
        if pkg is not None and spec is not None and req is not None:
            layer.couplings.append(
                Coupling(
                    pkg,
                    spec,
                    canonicalize_name(req.name),
                    req.specifier,
                    reason,
                    link,
                    sev,
                    scope,
                    reader.origin(path),
                )
            )

    for path, value in reader.entries(top, "native-pin"):
        body = reader.table(value, path, _NATIVE_PIN_KEYS, ("soname", "version"))
        if body is None:
            continue
        soname = reader.string(body, path, "soname")
        if soname is not None and (not soname or "/" in soname or soname != soname.strip()):
            reader.problem(
                (*path, "soname"),
                f"{reader.dotted((*path, 'soname'))}: expected a library file name such as "
                f"'libnccl.so.2', got {soname!r}",
            )
            soname = None
        spec = reader.specifier(body, path, "version")
        consumer = reader.string(body, path, "consumer", "") or ""
        sev, scope = reader.severity(body, path), reader.scope(body, path)
        reason = reader.string(body, path, "reason", "") or ""
        link = reader.string(body, path, "link", "") or ""
        if soname is not None and spec is not None:
            layer.native_pins.append(
                NativePin(soname, spec, consumer, reason, link, sev, scope, reader.origin(path))
            )

    for path, value in reader.entries(top, "waiver"):
        body = reader.table(value, path, _WAIVER_KEYS, ("package", "rule", "reason", "expires"))
        if body is None:
            continue
        pkg = reader.package(body, path)
        rule = reader.string(body, path, "rule")
        if rule is not None and (rule not in RULES or not RULES[rule].configurable):
            reader.problem(
                (*path, "rule"),
                f"{reader.dotted((*path, 'rule'))}: unknown rule "
                f"{rule!r} (expected one of: {', '.join(CONFIGURABLE_RULES)})",
            )
            rule = None
        why = reader.string(body, path, "reason")
        if why is not None and not why.strip():
            reader.problem(
                (*path, "reason"),
                f"{reader.dotted((*path, 'reason'))}: a waiver needs a reason, got {why!r}",
            )
        expires = body.get("expires")
        if isinstance(expires, str):
            with contextlib.suppress(ValueError):
                expires = _dt.date.fromisoformat(expires)
        if isinstance(expires, _dt.datetime):
            expires = expires.date()
        if "expires" in body and not isinstance(expires, _dt.date):
            reader.problem(
                (*path, "expires"),
                f"{reader.dotted((*path, 'expires'))}: expected "
                f"a date such as 2026-03-31, got {body['expires']!r}",
            )
            expires = None
        envs = reader.strings(body, path, "environments") or ()
        if pkg is not None and rule is not None and why and isinstance(expires, _dt.date):
            layer.waivers.append(Waiver(pkg, rule, why, expires, envs, reader.origin(path)))
    return layer, sorted(reader.problems, key=lambda p: p.line)


def _read(path: Path) -> tuple[str, KeyPath | None, str]:
    """The file's text, its key prefix (``tool.pinguard`` in a pyproject) and its digest."""
    data = path.read_bytes()
    text = data.decode("utf-8")
    prefix = PYPROJECT_PREFIX if path.name == "pyproject.toml" else None
    return text, prefix, "sha256:" + hashlib.sha256(data).hexdigest()


def _missing_hint(ref: str) -> str:
    """For a relative ``extend`` naming a built-in's file (``default.toml``) that is not
    beside the extending file: how to name the built-in from anywhere."""
    if ref.startswith(BUILTIN_PREFIX) or Path(ref).is_absolute():
        return ""
    name = Path(ref).name
    if name.endswith(".toml") and name[: -len(".toml")] in builtin_policies():
        return f' (the built-in policy is extend = ["{BUILTIN_PREFIX}{name[: -len(".toml")]}"])'
    return ""


def _collect(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[_Layer], list[PolicyProblem]]:
    """Load ``paths`` and everything they extend, depth first, each file once."""
    layers: list[_Layer] = []
    problems: list[PolicyProblem] = []
    done: set[Path | str] = set()

    def visit(
        ref: str,
        base: Path | None,
        stack: tuple[Path | str, ...],
        where: tuple[str, int] | None,
    ) -> None:
        """Load ``ref`` (relative to the directory ``base``; a built-in by name) and what it
        extends; ``where`` is the file and line that extend it (None: given directly)."""
        builtin = ref.startswith(BUILTIN_PREFIX)
        path = Path(ref) if base is None or Path(ref).is_absolute() else base / ref
        key: Path | str = ref if builtin else path.resolve()
        if key in stack:
            chain = " -> ".join(str(p) for p in (*stack[stack.index(key) :], key))
            file, line = where or (ref, 1)
            problems.append(PolicyProblem(file, line, f"extend: cycle {chain!r}"))
            return
        if key in done:
            return
        prefix: KeyPath | None = None
        if builtin:
            found_builtin = _builtin(ref)
            if found_builtin is None:
                file, line = where or (ref, 1)
                known = ", ".join(BUILTIN_PREFIX + n for n in builtin_policies())
                problems.append(
                    PolicyProblem(
                        file,
                        line,
                        f"{'extend: ' if where else ''}no built-in policy {ref!r} "
                        f"(built-in: {known})",
                        unreadable=where is None,
                    )
                )
                return
            label, data = found_builtin
            text, digest = data.decode("utf-8"), "sha256:" + hashlib.sha256(data).hexdigest()
        else:
            label = str(path)
            try:
                text, prefix, digest = _read(path)
            except OSError as exc:
                reason = f"{exc.strerror or exc}{_missing_hint(ref) if where else ''}"
                if where is None:
                    problems.append(
                        PolicyProblem(label, 1, f"cannot read {label!r}: {reason}", unreadable=True)
                    )
                else:
                    file, line = where
                    problems.append(
                        PolicyProblem(file, line, f"extend: cannot read {label!r}: {reason}")
                    )
                return
            except UnicodeDecodeError:
                problems.append(PolicyProblem(label, 1, "not UTF-8 text"))
                return
        layer, found = _parse(label, text, prefix)
        layer.digest = digest
        problems.extend(found)
        for extended, line in layer.extends:
            target = extended
            if builtin and not extended.startswith(BUILTIN_PREFIX):
                # a built-in extends other built-ins, by name or by their file name
                target = BUILTIN_PREFIX + Path(extended).name.removesuffix(".toml")
            visit(target, None if builtin else path.parent, (*stack, key), (label, line))
        done.add(key)
        layers.append(layer)

    for p in paths:
        visit(os.fspath(p), None, (), None)
    return layers, problems


def _fold(layers: Iterable[_Layer]) -> Policy:
    rules = {cfg.rule: cfg for cfg in default_rules()}
    pins: list[Pin] = []
    forbidden: list[Forbidden] = []
    couplings: list[Coupling] = []
    waivers: list[Waiver] = []
    native_pins: list[NativePin] = []
    files: list[str] = []
    digests: list[str] = []
    require_guard = False
    for layer in layers:
        files.append(layer.file)
        digests.append(layer.digest)
        if layer.require_guard is not None:
            require_guard = layer.require_guard
        for rule_id, (fields, scope_fields, origin) in layer.rules.items():
            cfg = rules[rule_id]
            scope = dataclasses.replace(cfg.scope, **scope_fields)
            rules[rule_id] = dataclasses.replace(cfg, **fields, scope=scope, origin=origin)
        pins.extend(layer.pins)
        forbidden.extend(layer.forbidden)
        couplings.extend(layer.couplings)
        waivers.extend(layer.waivers)
        native_pins.extend(layer.native_pins)
    return Policy(
        rules=tuple(rules[r] for r in CONFIGURABLE_RULES),
        pins=tuple(pins),
        forbidden=tuple(forbidden),
        couplings=tuple(couplings),
        waivers=tuple(waivers),
        require_guard=require_guard,
        files=tuple(files),
        native_pins=tuple(native_pins),
        digests=tuple(digests),
        chosen="given" if files else "default",
    )


def check_policy_files(paths: Sequence[str | os.PathLike[str]]) -> tuple[PolicyProblem, ...]:
    """Every problem in ``paths`` and the files they extend (empty: all valid)."""
    return tuple(_collect(paths)[1])


def load_policy(*paths: str | os.PathLike[str]) -> Policy:
    """Load, validate and merge policy files in order (none: the built-in default).

    Raises ``PolicyError`` (a ``ConfigError``) listing every problem with file and line.
    """
    layers, problems = _collect(paths)
    if problems:
        raise PolicyError(problems)
    return _fold(layers)


def parse_policy(text: str, file: str = "<string>") -> Policy:
    """Parse policy TOML from a string (``extend`` is not allowed here)."""
    layer, problems = _parse(file, text, None)
    layer.digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if layer.extends:
        problems.append(PolicyProblem(file, layer.extends[0][1], "extend: not allowed here"))
    if problems:
        raise PolicyError(problems)
    return _fold([layer])


def load_run_policy(
    paths: Sequence[str | os.PathLike[str]], start: str | os.PathLike[str] | None = None
) -> Policy:
    """The policy of one command: the given ``paths`` in order; without any, the file
    ``discover(start)`` finds; without one, the built-in default. ``none`` alone is the
    inventory policy (nothing judged; a file named ``none`` is ``./none``)."""
    if [str(p) for p in paths] == [NO_POLICY]:
        return dataclasses.replace(inventory_policy(), chosen="none")
    if NO_POLICY in (str(p) for p in paths):
        raise ConfigError(
            "--policy none (no policy: an inventory) cannot be combined with policy files; "
            "write ./none for a file named none"
        )
    if paths:
        return load_policy(*paths)
    found = discover(start)
    if found is None:
        return default_policy()
    return dataclasses.replace(load_policy(found), chosen="discovered")
