"""`erdma sim`: the main job on a simulated node, for `make demo` and for people evaluating us."""

from __future__ import annotations

import tempfile

import click

from erdma.host.devices import scan
from erdma.testing import fakehost
from erdma.tools.devices import render_table


@click.command("sim")
@click.option(
    "--variant",
    type=click.Choice(sorted(fakehost.VARIANTS)),
    default="default",
    show_default=True,
    help="Which fixture host to simulate.",
)
def sim_command(variant: str) -> None:
    """Build a fixture host and show what the agent discovers on it."""
    with tempfile.TemporaryDirectory(prefix="erdma-sim-") as root:
        fakehost.build(root, variant)
        click.echo(f"== fixture host ({variant}) at {root}")
        click.echo(render_table(scan(root)))
