"""The human view: a summary first, then rich tables of what the steps changed, findings.

The header names pinguard's version and the policy; the summary (``report.summary``) counts
changes per environment and kind, findings per severity, and lists the steps that changed
something, so a big image reads on one screen; it says how many entries could not be read
(listed as ``incomplete`` at the end), and the verdict line says why it is what it is
(``verdict: fail (11 entries could not be read: incomplete)``). The step tables then show what
``summary.listed`` keeps (``--all``: everything), each headed by its step and, on a second
line, its environment and what it leaves out; downgrades and unmet requirements stand out
in red. ``draw`` draws onto a ``rich.console.Console`` the CLI hands it (so it
never decides where output goes); ``render`` draws into text ``options.width`` columns wide.
Both are deterministic for a given width.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pinguard import __version__
from pinguard.buildfile.history import command_text
from pinguard.models import AuditResult, ChangeKind, Severity
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.summary import (
    KINDS,
    Summary,
    audit_reasons,
    header,
    layer_read_lines,
    listed,
    other_packages_text,
    plural,
    summarize,
    verdict_text,
)
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
    """Draw the report onto ``console`` (a terminal gets colours, a file plain text): the
    header, the summary, then the changes ``summary.listed`` keeps, findings and verdict."""
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
    # header lines are not wrapped: a long path stays on its line, for grep and copying
    console.print(
        Text(f"pinguard {__version__}  policy: {dict(header(result))['policy']}", style="dim"),
        soft_wrap=True,
    )
    for note in result.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    for line in layer_read_lines(result):
        console.print(Text(line, style="dim"), soft_wrap=True)
    summary = summarize(result, options.show_all)
    _draw_summary(result, summary, console, options)
    hidden = 0
    for step in result.steps:
        rows = listed(result, step, options.show_all)
        left_out = len(step.changes) - len(rows)
        hidden += left_out
        if not rows and not step.unmet:
            continue
        envs = sorted({c.environment for c in rows} | {u.environment for u in step.unmet})
        many = len(envs) > 1
        # what the rows share and what they leave out, read before the rows: a second title
        # line (a caption would print below the table)
        about = None if many else envs[0]
        if left_out:
            more = f"and {left_out} more added to environments new in this step (--all lists them)"
            about = more if about is None else f"{about}; {more}"
        title = Text.assemble((f"step {step.index}  ", "bold"), _short(step.created_by))
        if about is not None:
            title.append("\n" + about, style="dim")
        table = Table(title=title, title_justify="left", expand=False)
        if many:
            table.add_column("environment", style="dim", overflow="fold")
        table.add_column("package", overflow="fold")
        table.add_column("change")
        table.add_column("version", overflow="fold")
        table.add_column("why (nearest cause first)", overflow="fold")
        for c in rows:
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
    if not summary.steps:
        console.print("no build step changed a Python distribution")
    elif hidden:
        console.print(
            Text(
                f"{hidden} distribution(s) added to environments new in their step are counted "
                "above, not listed (--all lists them)",
                style="dim",
            )
        )
    no_python = options.no_python_text(result)
    if no_python is not None:
        console.print(Text(no_python, style="bold yellow"))
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
        Text(
            f"verdict: {verdict_text(verdict, audit_reasons(result, options))}",
            style="bold green" if verdict == "pass" else "bold red",
        ),
        soft_wrap=True,
    )


def _draw_summary(
    result: AuditResult, summary: Summary, console: Console, options: RenderOptions
) -> None:
    """The summary: environments with their counts, findings, the steps that changed."""
    if summary.environments:
        table = Table(title="summary", title_justify="left", expand=False)
        widest = max(len(e.path) for e in summary.environments)
        table.add_column("environment", overflow="fold", min_width=min(widest, 64))
        table.add_column("python")
        table.add_column("distributions", justify="right")
        # only the kinds that happened (and unmet when any), so the table stays narrow
        kinds = [i for i in range(len(KINDS)) if any(e.counts[i] for e in summary.environments)]
        for i in kinds:
            table.add_column(KINDS[i].value, justify="right")
        any_unmet = any(e.unmet for e in summary.environments)
        if any_unmet:
            table.add_column("unmet", justify="right")
        for env in summary.environments:
            path = env.path
            real = next(
                (e.real_path for e in result.final.environments if e.path == env.path), None
            )
            if real:
                path += f" (real_path {real})"
            unmet = [Text(str(env.unmet), style="bold red") if env.unmet else ""]
            table.add_row(
                path,
                env.python,
                str(env.distributions),
                *(str(env.counts[i]) if env.counts[i] else "" for i in kinds),
                *(unmet if any_unmet else []),
            )
        console.print(table)
    others = other_packages_text(result)
    if others is not None:
        console.print(Text(others, style="dim"), soft_wrap=True)
    errors = summary.findings[0]
    console.print(
        Text(
            f"findings: {summary.findings_text()}",
            style="bold red" if errors else "",
        )
    )
    if result.incomplete:
        gate = (
            "allowed by --allow-incomplete"
            if options.allow_incomplete
            else "the verdict fails unless --allow-incomplete"
        )
        console.print(
            Text(
                f"could not be read: {plural(len(result.incomplete), 'entry')}, listed at the "
                f"end as incomplete ({gate})",
                style="bold yellow",
            ),
            soft_wrap=True,
        )
    if summary.steps:
        console.print(Text("steps that changed something:", style="bold"))
        for s in summary.steps:
            console.print(
                Text.assemble(
                    f"  step {s.index:<3} ",
                    (f"{s.text():<22}", "bold red" if s.counts[2] or s.unmet else ""),
                    " ",
                    _short(s.command, max(40, console.width - 34)),
                )
            )
    console.print()
