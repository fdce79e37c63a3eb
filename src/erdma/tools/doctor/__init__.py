"""`erdma doctor`: is eRDMA usable here (node, container or pod), and if not, what to do.

Every check prints PASS, WARN, FAIL or SKIP with what it saw and a remedy. The exit code is 1
when any check fails, so scripts and readiness probes can gate on it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

# importing the check modules registers their checks, in report order
from erdma.tools.doctor import devices, environment, image, nccl  # noqa: F401
from erdma.tools.doctor.model import REGISTRY, DoctorContext, Finding, Outcome, Verdict
from erdma.tools.options import EXISTING_DIR, root_option

#: bumped when a key of `erdma doctor --json` changes meaning or disappears
JSON_SCHEMA_VERSION = 1


def run_checks(ctx: DoctorContext) -> list[Finding]:
    """Every registered check, in order; a check that crashes is reported, not fatal."""
    findings = []
    for item in REGISTRY:
        try:
            outcome = item.func(ctx)
        except Exception as exc:  # a doctor must report, not die, on a strange host
            outcome = Outcome(
                Verdict.FAIL, f"check crashed: {type(exc).__name__}: {exc}", "report a bug"
            )
        findings.append(Finding(item.name, item.title, outcome))
    return findings


def failed(findings: Sequence[Finding]) -> bool:
    return any(f.outcome.verdict is Verdict.FAIL for f in findings)


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    counts = Counter(f.outcome.verdict for f in findings)
    return {v.value: counts.get(v, 0) for v in Verdict}


def render_text(findings: Sequence[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.outcome.verdict.value:<4}  {f.check:<{width}}  {f.outcome.message}")
        if f.outcome.remedy and f.outcome.verdict in (Verdict.FAIL, Verdict.WARN):
            lines.append(f"{'':<4}  {'':<{width}}  remedy: {f.outcome.remedy}")
    counts = summary(findings)
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(lines)


def to_json(ctx: DoctorContext, findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA_VERSION,
        "root": str(ctx.root.root),
        "ok": not failed(findings),
        "summary": summary(findings),
        "checks": [
            {
                "name": f.check,
                "title": f.title,
                "verdict": f.outcome.verdict.value,
                "message": f.outcome.message,
                "remedy": f.outcome.remedy,
            }
            for f in findings
        ],
    }


@click.command("doctor")
@root_option("Root holding sys/, dev/, etc/.")
@click.option(
    "--proc-root",
    default=None,
    type=EXISTING_DIR,
    help="The proc tree to read (default: <root>/proc), e.g. /host/proc in a pod.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def doctor_command(ctx: click.Context, root: str, proc_root: str | None, as_json: bool) -> None:
    """Check that eRDMA is usable here; exit 1 when any check fails."""
    doctor = DoctorContext.create(root, proc_root)
    findings = run_checks(doctor)
    if as_json:
        click.echo(json.dumps(to_json(doctor, findings), indent=2))
    else:
        click.echo(render_text(findings))
    ctx.exit(1 if failed(findings) else 0)


__all__ = ["doctor_command", "run_checks"]
