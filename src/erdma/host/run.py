"""The one way the agent runs host commands.

Commands go through a `Runner` so that tests can record them (`RecordingRunner`) and so that a
containerised agent can run them in the host's mount namespace (`nsenter -t 1 -m --`), where the
host's kmod and module tree live.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import shlex
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """One line for error messages: the command, its status and what it said."""
        said = (self.stderr or self.stdout).strip().splitlines()
        tail = f": {said[-1]}" if said else ""
        return f"`{shlex.join(self.argv)}` exited {self.returncode}{tail}"


class Runner:
    """Runs commands on the host, optionally inside the host's mount namespace."""

    #: file descriptors every command inherits (the node's install lock, erdma.host.install_lock)
    pass_fds: tuple[int, ...] = ()

    def __init__(self, host_namespace: bool = False, timeout: float = 120.0) -> None:
        self.host_namespace = host_namespace
        self.timeout = timeout

    def keeping(self, *fds: int) -> Runner:
        """This runner, with its commands inheriting ``fds`` as well."""
        clone = copy.copy(self)
        clone.pass_fds = (*self.pass_fds, *fds)
        return clone

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The argv as executed: prefixed with nsenter when running from a container."""
        if self.host_namespace:
            return ("nsenter", "-t", "1", "-m", "--", *argv)
        return tuple(argv)

    async def run(
        self, argv: Sequence[str], input_text: str | None = None, timeout: float | None = None
    ) -> Result:
        """Run `argv` to completion within `timeout` (default: the runner's), as exit 124 when
        it runs out; the command's whole process group is killed then, so an installer's
        compilers do not outlive it."""
        full = self.wrap(argv)
        limit = self.timeout if timeout is None else timeout
        log.debug("run", extra={"argv": list(full)})
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE if input_text is not None else None,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=self.pass_fds,
            )
        except FileNotFoundError as exc:
            return Result(tuple(argv), 127, "", f"{full[0]}: command not found ({exc})")
        except OSError as exc:
            return Result(tuple(argv), 126, "", f"{full[0]}: cannot execute ({exc})")
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(input_text.encode() if input_text is not None else None), limit
            )
        except TimeoutError:
            await _kill_group(proc)
            return Result(tuple(argv), 124, "", f"timed out after {limit:g}s")
        except asyncio.CancelledError:  # the agent is stopping: leave no orphan behind
            await _kill_group(proc)
            raise
        return Result(tuple(argv), proc.returncode or 0, out.decode(), err.decode())


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command and everything it started (its own session, see `run`)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


Handler = Callable[[tuple[str, ...]], Result | None]


@dataclass
class RecordingRunner(Runner):
    """A runner for tests: records every argv and answers through handlers.

    Handlers are tried in order; the first that returns a Result answers. Unanswered commands
    succeed with empty output. Handlers may change a fixture tree (e.g. `rmmod erdma` removes
    `sys/module/erdma`), which is how tests see the effect of a command sequence.
    """

    handlers: list[Handler] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    host_namespace: bool = False
    timeout: float = 0.0

    async def run(
        self, argv: Sequence[str], input_text: str | None = None, timeout: float | None = None
    ) -> Result:
        full = self.wrap(argv)
        self.calls.append(full)
        for handler in self.handlers:
            answer = handler(tuple(argv))
            if answer is not None:
                return answer
        return Result(tuple(argv), 0)
