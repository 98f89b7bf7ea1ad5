"""The human view: rich tables of the steps that changed something, then findings.

Only steps with changes or unmet requirements are shown; downgrades and unmet requirements
stand out in red. ``draw`` draws onto a ``rich.console.Console`` the CLI hands it (so it
never decides where output goes); ``render`` draws into text ``options.width`` columns wide.
Both are deterministic for a given width.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pinguard.build.history import command_text
from pinguard.models import AuditResult, ChangeKind, Severity
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.why import reasons

_KIND_STYLE = {
    ChangeKind.ADDED: "green",
    ChangeKind.REMOVED: "yellow",
    ChangeKind.UPGRADED: "cyan",
    ChangeKind.DOWNGRADED: "bold red",
    ChangeKind.REINSTALLED: "magenta",
    ChangeKind.CHANGED: "bold yellow",
}
_SEV_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}


def _short(command: str, width: int = 110) -> str:
    text = " ".join(command_text(command).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The table as plain text, ``options.width`` columns wide."""
    buf = io.StringIO()
    console = Console(file=buf, width=options.width, force_terminal=False, soft_wrap=False)
    draw(result, console, options)
    return buf.getvalue()


def draw(result: AuditResult, console: Console, options: RenderOptions = DEFAULT_OPTIONS) -> None:
    """Draw the tables onto ``console`` (a terminal gets colours, a file plain text)."""
    image = result.image
    console.print(
        Text.assemble(
            ("image ", "bold"),
            image.reference,
            "  ",
            (image.manifest_digest or "", "dim"),
            "  ",
            (str(image.platform) if image.platform else "", "dim"),
        )
    )
    for note in result.notes:
        console.print(Text(f"note: {note}", style="dim"))
    shown = 0
    for step in result.steps:
        if not step.changes and not step.unmet:
            continue
        shown += 1
        envs = sorted({c.environment for c in step.changes} | {u.environment for u in step.unmet})
        many = len(envs) > 1
        table = Table(
            title=Text.assemble((f"step {step.index}  ", "bold"), _short(step.created_by)),
            title_justify="left",
            caption=None if many else envs[0],
            caption_justify="left",
            expand=False,
        )
        if many:
            table.add_column("environment", style="dim", overflow="fold")
        table.add_column("package", overflow="fold")
        table.add_column("change")
        table.add_column("version", overflow="fold")
        table.add_column("why (nearest cause first)", overflow="fold")
        for c in sorted(step.changes, key=lambda c: (c.environment, c.name)):
            version = (
                f"{c.before} -> {c.after}"
                if c.before and c.after and c.before != c.after
                else (c.after or c.before or "")
            )
            why = "\n".join(
                f"{'  ' * i}{line}"
                for i, line in enumerate(reasons(c.kind, c.name, c.causes, step.created_by))
            )
            row: list[str | Text] = [
                c.name,
                Text(c.kind.value, style=_KIND_STYLE[c.kind]),
                version,
                why,
            ]
            table.add_row(*([c.environment] if many else []), *row)
        for u in step.unmet:
            have = f"{u.installed} installed" if u.installed else "not installed"
            row = [
                str(u.package),
                Text("unmet", style="bold red"),
                u.version,
                Text(f"requires {u.requirement}, {have}", style="red"),
            ]
            table.add_row(*([u.environment] if many else []), *row)
        console.print(table)
    if not shown:
        console.print("no build step changed a Python distribution")
    env_text = ", ".join(
        f"{e.path} ({f'real_path {e.real_path}, ' if e.real_path else ''}"
        f"python {e.python or '?'}, {len(e.distributions)} distributions)"
        for e in result.final.environments
    )
    no_python = options.no_python_text(result)
    if no_python is not None:
        console.print(Text(no_python, style="bold yellow"))
    else:
        console.print(Text(f"environments: {env_text}", style="dim"))
    if result.findings:
        table = Table(title="findings", title_justify="left")
        for col in ("severity", "rule", "step", "package", "message"):
            table.add_column(col, overflow="fold")
        for f in sorted(
            result.findings, key=lambda f: (-f.severity.rank, f.step or 0, f.package or "", f.rule)
        ):
            sev = Text(
                f.severity.value + (" (waived)" if f.waived else ""),
                style=_SEV_STYLE[f.severity] if not f.waived else "dim",
            )
            table.add_row(sev, f.rule, str(f.step or ""), f.package or "", f.message)
        console.print(table)
    for item in result.incomplete:
        console.print(Text(f"incomplete: {item.what}: {item.why}", style="bold yellow"))
    verdict = options.verdict(result)
    console.print(
        Text(f"verdict: {verdict}", style="bold green" if verdict == "pass" else "bold red")
    )
