"""The versioned JSON document (schema ``pinguard/audit/v1``, shipped as a JSON Schema).

Turns an ``AuditResult`` into plain data with every list sorted, so the same image always
gives the same bytes (for one pinguard version, which the document names, with the policy
that judged it). Each change carries ``reasons``, the lines the table shows, nearest cause
first. The schema file lives in ``pinguard/schemas/audit-v1.schema.json``.
"""

from __future__ import annotations

import json

from pinguard import __version__
from pinguard.models import (
    SCHEMA_ID,
    AuditResult,
    Finding,
    LayerRead,
    NativeLibrary,
    Package,
    Prediction,
    Resolution,
    Snapshot,
)
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.why import reasons

# A JSON object as plain data.
JsonObject = dict[str, object]


def finding_dict(f: Finding) -> JsonObject:
    return {
        "rule": f.rule,
        "severity": f.severity.value,
        "message": f.message,
        "package": f.package,
        "environment": f.environment,
        "step": f.step,
        "versions": list(f.versions),
        "policy_file": f.policy_file,
        "policy_line": f.policy_line,
        "waived": f.waived,
        "waiver_reason": f.waiver_reason,
    }


def finding_sort_key(f: Finding) -> tuple[int, str, str, str, str]:
    return (f.step or 0, f.environment or "", f.package or "", f.rule, f.message)


def native_library_dict(lib: NativeLibrary) -> JsonObject:
    owner = (
        None
        if lib.owner_kind is None
        else {
            "kind": lib.owner_kind,
            "name": lib.owner,
            "version": lib.owner_version,
            "environment": lib.owner_environment,
        }
    )
    return {
        "path": lib.path,
        "soname": lib.soname,
        "needed": list(lib.needed),
        "rpath": list(lib.rpath),
        "runpath": list(lib.runpath),
        "digest": lib.digest,
        "size": lib.size,
        "layer": lib.layer or None,
        "library": lib.library,
        "version": lib.version,
        "owner": owner,
        "problem": lib.problem,
    }


def resolution_dict(r: Resolution) -> JsonObject:
    return {
        "consumer": r.consumer,
        "needed": r.needed,
        "path": r.path,
        "real": r.real,
        "via": r.via or None,
        "directory": r.directory or None,
        "basis": r.basis,
        **({"preloaded_by": r.preloaded_by} if r.preloaded_by else {}),
        **(
            {"search_order": r.search_real, "search_via": r.search_via or None}
            if r.basis == "preload"
            else {}
        ),
    }


def _step_native(before: Snapshot, after: Snapshot) -> JsonObject | None:
    """What one step did to the native libraries, and the resolutions when they changed."""
    old = {lib.path: lib for lib in before.native}
    new = {lib.path: lib for lib in after.native}
    libs = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a is not None and b is not None and a.digest == b.digest and a.owner == b.owner:
            continue
        kind = "added" if a is None else "removed" if b is None else "changed"
        lib = b if b is not None else a
        assert lib is not None
        libs.append(
            {
                "path": path,
                "change": kind,
                "soname": lib.soname,
                "version": lib.version,
                "owner": lib.owner,
                "owner_version": lib.owner_version,
            }
        )
    if not libs and before.resolutions == after.resolutions:
        return None
    return {
        "libraries": libs,
        "resolutions": [resolution_dict(r) for r in after.resolutions],
    }


def _in_env(path: str, env_path: str) -> bool:
    return path.startswith(env_path.rstrip("/") + "/")


def to_dict(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> JsonObject:
    """The JSON document as plain data (see ``render``)."""
    image = result.image
    steps = []
    for step in result.steps:
        steps.append(
            {
                "index": step.index,
                "created_by": step.created_by,
                "layer_digest": step.layer_digest,
                "changes": [
                    {
                        "environment": c.environment,
                        "name": c.name,
                        "kind": c.kind.value,
                        "before": c.before,
                        "after": c.after,
                        "causes": [
                            {
                                "package": x.package,
                                "version": x.version,
                                "requirement": x.requirement,
                            }
                            for x in c.causes
                        ],
                        "reasons": reasons(c.kind, c.name, c.causes, step.created_by),
                    }
                    for c in sorted(step.changes, key=lambda c: (c.environment, c.name))
                ],
                "unmet": [
                    {
                        "environment": u.environment,
                        "package": u.package,
                        "version": u.version,
                        "requirement": u.requirement,
                        "installed": u.installed,
                    }
                    for u in sorted(
                        step.unmet, key=lambda u: (u.environment, u.package, u.requirement)
                    )
                ],
            }
        )
    for out, step in zip(steps, result.steps, strict=True):
        if step.prediction is not None:
            out["prediction"] = prediction_dict(step.prediction)
    previous = Snapshot()
    for out, snap in zip(steps, result.snapshots, strict=False):
        native = _step_native(previous, snap)
        if native is not None:
            out["native"] = native
        previous = snap
    envs_paths = [p for env in result.final.environments for p in (env.path, env.real_path) if p]
    environments: list[JsonObject] = [
        {
            "path": env.path,
            "python": env.python,
            "packages": [
                {
                    "name": d.name,
                    "version": d.raw_version,
                    "pep440": d.pep440,
                    "installer": d.installer,
                    "requested": d.requested,
                    "metadata_path": d.metadata_path,
                    "requires_python": d.requires_python,
                    "direct_url": d.direct_url,
                }
                for d in env.distributions
            ],
        }
        for env in result.final.environments
    ]
    for env_out, env in zip(environments, result.final.environments, strict=True):
        if env.real_path is not None:
            env_out["real_path"] = env.real_path
        dirs = [p for p in (env.path, env.real_path) if p]
        libs = [
            native_library_dict(x)
            for x in result.final.native
            if any(_in_env(x.path, d) for d in dirs)
        ]
        if libs:
            env_out["native_libraries"] = libs
    system = [
        native_library_dict(lib)
        for lib in result.final.native
        if not any(_in_env(lib.path, e) for e in envs_paths)
    ]
    others = result.final.other_packages()
    return {
        "schema": SCHEMA_ID,
        "pinguard": {"version": __version__},
        **policy_field(result),
        "image": {
            "reference": image.reference,
            "transport": image.transport,
            "manifest_digest": image.manifest_digest,
            "platform": str(image.platform) if image.platform else None,
        },
        "steps": steps,
        "environments": environments,
        # a view of the records of kind "deb" (kept until the next schema revision)
        "debian_packages": [
            {"name": p.name, "version": p.version, "architecture": p.architecture}
            for p in result.final.debs
        ],
        **({"packages": [generic_package_dict(p) for p in others]} if others else {}),
        **({"native_libraries": system} if system else {}),
        **(
            {"resolutions": [resolution_dict(r) for r in result.final.resolutions]}
            if result.final.resolutions
            else {}
        ),
        "findings": [finding_dict(f) for f in sorted(result.findings, key=finding_sort_key)],
        "incomplete": [{"what": i.what, "why": i.why} for i in result.incomplete],
        "notes": list(result.notes),
        **(
            {"layer_reads": [layer_read_dict(r) for r in result.layer_reads]}
            if result.layer_reads
            else {}
        ),
        **no_python_field(result, options),
        "verdict": options.verdict(result),
    }


def prediction_dict(prediction: Prediction) -> JsonObject:
    """How ``pinguard predict`` made a step (schema revision 9): ``predicted`` or
    ``unpredicted`` (with the reason), the resolver that answered and what it modelled, the
    Dockerfile line, and where the real installer could differ."""
    return {
        "status": prediction.status,
        "resolver": prediction.resolver or None,
        "reason": prediction.reason or None,
        "dockerfile": prediction.dockerfile,
        "line": prediction.line,
        "notes": list(prediction.notes),
    }


def layer_read_dict(read: LayerRead) -> JsonObject:
    """How one layer was read under ``--layer-read lazy`` (schema revision 7)."""
    return {
        "layer": read.layer,
        "mode": read.mode,
        "reason": read.reason,
        "fetched": read.fetched,
        "blob_size": read.blob_size,
        "chunks_verified": read.chunks_verified,
        "files_whole": read.files_whole,
        "files_in_parts": read.files_in_parts,
        "digests_from_toc": read.digests_from_toc,
        "diff_id_proven": read.mode == "full",
    }


def generic_package_dict(package: Package) -> JsonObject:
    """One generic package record (schema revision 5): every field, properties as an object."""
    out: JsonObject = {
        "kind": package.kind,
        "name": package.name,
        "version": package.version,
        "location": package.location,
        "owner": package.owner,
        "properties": dict(package.properties),
    }
    if package.purl is not None:
        out["purl"] = package.purl
    return out


def policy_field(result: AuditResult) -> JsonObject:
    """``{"policy": {"source", "files": [{"path", "digest"}]}}`` when a policy judged
    ``result`` (schema revision 4), else ``{}``."""
    if result.policy is None:
        return {}
    return {
        "policy": {
            "source": result.policy.kind,
            "files": [{"path": p, "digest": d} for p, d in result.policy.files],
        }
    }


def no_python_field(result: AuditResult, options: RenderOptions) -> JsonObject:
    """``{"no_python_environment": {message, allowed}}`` when ``result`` has no Python
    environment, else ``{}`` (the key is absent, so documents of other images keep their
    bytes; schema revision 3)."""
    if not result.no_python:
        return {}
    return {
        "no_python_environment": {
            "message": result.no_python_message(),
            "allowed": options.allow_no_python,
        }
    }


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The ``pinguard/audit/v1`` JSON document for ``result``, verdict at ``options.fail_on``."""
    return json.dumps(to_dict(result, options), indent=2) + "\n"
