"""`erdma cdi generate`: write this host's eRDMA CDI spec where container runtimes look for it."""

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
    try:
        spec = cdi.build_spec(scan(root))
    except cdi.NoDevicesError:
        raise click.ClickException(
            f"no eRDMA devices found under {root}; no CDI spec written "
            "(is the erdma driver loaded? see `erdma doctor`)"
        ) from None
    path = cdi.write_spec(spec, output_dir, fmt)
    click.echo(f"wrote {path} (cdiVersion {spec['cdiVersion']})")
    for entry in spec["devices"]:
        click.echo(cdi.qualified_name(entry["name"]))
