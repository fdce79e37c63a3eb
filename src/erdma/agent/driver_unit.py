"""Node preparation as a unit of its own: `erdma driver prepare` once, then `erdma driver watch`.

Installing the driver and loading it in the chosen mode need rights the node agent must not
keep for months: the host's PID namespace (nsenter into PID 1 for the host's package manager and
kmod), `SYS_MODULE` and the package manager's file capabilities. The chart runs `prepare` as
the init container of the driver DaemonSet's pod, which holds those rights only until it exits,
and `watch` as that pod's long-running container, which holds no capability at all: it checks
that erdma stays loaded in the prepared mode and fails, naming the remedy, when it does not (a
container restart does not run init containers again; deleting the pod does).

`prepare` writes what it prepared to a small JSON file in a volume the two containers share, so
`watch` needs neither the configuration's rights nor a rescan to know what to expect.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from erdma.agent.config import AgentConfig
from erdma.agent.events import NodeEvents
from erdma.agent.prepare import PrepareResult, prepare_until_ready
from erdma.host.devices import scan
from erdma.host.driver import DriverMode, choose_mode, loaded_driver, yes_no
from erdma.host.run import Runner

log = logging.getLogger(__name__)

COMPONENT = "erdma-driver"
STATE_FILE = Path("/run/erdma-driver/prepared.json")
EVENTS_DRAIN_SECONDS = 15.0  # how long `prepare` waits for its Events to be posted


@dataclass(frozen=True)
class Prepared:
    """What `prepare` left loaded, as `watch` expects to keep finding it."""

    mode: DriverMode
    compat_mode: bool | None  # None: the upstream driver, which has no compat_mode

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"mode": self.mode.value, "compatMode": self.compat_mode})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> Prepared:
        """The file `prepare` wrote; ValueError naming the file when it is missing or damaged."""
        try:
            data = json.loads(path.read_text())
            return cls(DriverMode(data["mode"]), data["compatMode"])
        except FileNotFoundError:
            raise ValueError(
                f"{path} does not exist: `erdma driver prepare` has not finished on this node "
                "(it runs first, as the pod's init container, and writes it)"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not what `erdma driver prepare` writes: {exc}") from None


async def prepare_once(
    config: AgentConfig, state_file: Path, runner: Runner | None = None
) -> PrepareResult:
    """Prepare the node (retrying until it is ready, as the agent does), record the outcome for
    `watch`, and post the Events before returning. ``runner``: the host's commands (tests
    give a fixture node's)."""
    events = NodeEvents(config.node_name, config.kubeconfig or None, component=COMPONENT)
    poster = asyncio.create_task(events.post_forever())
    try:
        gpus = scan(config.host_root).gpus
        mode, reason = choose_mode(config.prefer_driver, gpus)
        log.info("driver mode chosen", extra={"mode": mode.value, "why": reason})
        runner = runner or Runner(host_namespace=config.host_namespace)
        result = await prepare_until_ready(config, runner, mode, gpus, events)
        Prepared(mode, result.compat_mode).write(state_file)
        await events.drain(EVENTS_DRAIN_SECONDS)
        return result
    finally:
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


def drift(prepared: Prepared, root: str | Path) -> str | None:
    """Why the node no longer has what was prepared, or None while it does."""
    now = loaded_driver(root)
    if not now.loaded:
        return f"erdma is no longer loaded (it was prepared in mode {prepared.mode.value})"
    if prepared.compat_mode is not None and now.compat_mode != prepared.compat_mode:
        shown = "absent" if now.compat_mode is None else yes_no(now.compat_mode)
        return (
            f"erdma was reloaded with compat_mode {shown}; mode {prepared.mode.value} loads it "
            f"with compat_mode={yes_no(prepared.compat_mode)}"
        )
    return None


async def watch(prepared: Prepared, root: str | Path, interval: float) -> str:
    """Check every ``interval`` seconds; return why the driver changed once it has."""
    while True:
        problem = drift(prepared, root)
        if problem is not None:
            return problem
        await asyncio.sleep(interval)
