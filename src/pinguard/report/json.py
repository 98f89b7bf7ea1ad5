"""The versioned JSON document (schema ``pinguard/audit/v1``, shipped as a JSON Schema).

Turns an ``AuditResult`` into plain data with every list sorted, so the same image always
gives the same bytes. The schema file lives in ``pinguard/schemas/audit-v1.schema.json``.
"""

from __future__ import annotations

import json

from pinguard.models import SCHEMA_ID, AuditResult, Finding
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions

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
    environments = [
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
    return {
        "schema": SCHEMA_ID,
        "image": {
            "reference": image.reference,
            "transport": image.transport,
            "manifest_digest": image.manifest_digest,
            "platform": str(image.platform) if image.platform else None,
        },
        "steps": steps,
        "environments": environments,
        "debian_packages": [
            {"name": p.name, "version": p.version, "architecture": p.architecture}
            for p in result.final.debs
        ],
        "findings": [finding_dict(f) for f in sorted(result.findings, key=finding_sort_key)],
        "incomplete": [{"what": i.what, "why": i.why} for i in result.incomplete],
        "notes": list(result.notes),
        "verdict": result.verdict(options.fail_on, options.allow_incomplete),
    }


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The ``pinguard/audit/v1`` JSON document for ``result``, verdict at ``options.fail_on``."""
    return json.dumps(to_dict(result, options), indent=2) + "\n"
