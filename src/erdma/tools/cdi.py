"""`erdma cdi generate`: write this host's eRDMA CDI spec where container runtimes look for it.

Engines re-read the spec directory whenever they resolve a name (Podman on every run, dockerd
and containerd on change), so the file is replaced atomically: see `erdma.cdi.write_spec`.
"""

from __future__ import annotations

from pathlib import Path

import click

from erdma import cdi
from erdma.host.devices import scan


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
@click.option("--root", default="/", show_default=True, help="Host root (a fixture in tests).")
def generate_command(output_dir: Path, fmt: str, root: str) -> None:
    """Write aliyun.com-erdma.yaml atomically and print the device names it defines."""
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
