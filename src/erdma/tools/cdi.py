"""`erdma cdi generate`: write this host's eRDMA CDI spec where container runtimes look for it;
`erdma cdi list`: the specs of erdma's kinds that engines would read, and their conflicts.

Engines re-read the spec directory whenever they resolve a name (Podman on every run, dockerd
and containerd on change), so the file is replaced atomically: see `erdma.cdi.write_spec`.
"""

from __future__ import annotations

from pathlib import Path

import click

from erdma import cdi
from erdma.host.devices import scan
from erdma.tools import cdi_specs
from erdma.tools.options import root_option


@click.group("cdi")
def cdi_group() -> None:
    """Container Device Interface (CDI) specs for eRDMA devices."""


@cdi_group.command("generate")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=cdi.DEFAULT_OUTPUT_DIR,
    show_default=True,
    help="Directory runtimes read specs from (/etc/cdi for static specs).",
)
@click.option("--format", "fmt", type=click.Choice(cdi.FORMATS), default="yaml", show_default=True)
@root_option("Host root (a fixture in tests).")
def generate_command(output_dir: Path, fmt: str, root: str) -> None:
    """Write aliyun.com-erdma.yaml (or .json, removing the other) and print its device names."""
    snapshot = scan(root)
    try:
        spec = cdi.build_spec(snapshot)
    except cdi.NoDevicesError:
        others = [d.name for d in snapshot.devices]
        hint = (
            f"the other RDMA devices here ({', '.join(others)}) are not eRDMA; use their "
            "vendor's CDI spec or `erdma docker args`"
            if others
            else "is the erdma driver loaded? see `erdma doctor`"
        )
        raise click.ClickException(
            f"no eRDMA devices found under {root}; no CDI spec written ({hint})"
        ) from None
    try:
        path = cdi.write_spec(spec, output_dir, fmt)
    except OSError as exc:
        raise click.ClickException(
            f"cannot write the CDI spec to --output-dir {str(output_dir)!r}: "
            f"{exc.strerror or exc} (it must be a writable directory)"
        ) from None
    click.echo(f"wrote {path} (cdiVersion {spec['cdiVersion']})")
    for entry in spec["devices"]:
        click.echo(cdi.qualified_name(entry["name"]))


@cdi_group.command("list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    default=cdi_specs.SPEC_DIRS,
    show_default=True,
    help="Directory engines read specs from (repeatable; a later one wins over an earlier).",
)
def list_command(spec_dirs: tuple[Path, ...]) -> None:
    """List the specs of erdma's kinds and their devices; exit 1 on conflicting specs."""
    specs = cdi_specs.read_specs(spec_dirs)
    if not specs:
        click.echo(
            f"no CDI spec of {' or '.join(cdi_specs.KINDS)} in {', '.join(map(str, spec_dirs))}"
        )
    for spec in specs:
        winner = cdi_specs.overridden_by(spec, specs)
        note = f" (overridden by {winner})" if winner else ""
        click.echo(f"{spec.path}: {spec.kind} {', '.join(spec.devices)}{note}")
    found = cdi_specs.conflicts(specs)
    if found:
        raise click.ClickException(
            f"conflicting CDI specs in {', '.join(str(c.directory) for c in found)}: "
            f"{'; '.join(c.describe() for c in found)}; engines refuse these devices "
            '("unresolvable CDI devices"): remove one of each (`erdma cdi generate` keeps '
            "one file, removing the other format's)"
        )
