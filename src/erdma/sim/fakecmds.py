"""kmod commands (`modinfo`, `modprobe`, `rmmod`) that act on a fixture host's sysfs.

A `RecordingRunner` handler: tests and `erdma sim` see the effect of a command sequence in the
tree (`rmmod erdma` removes `sys/module/erdma`, `modprobe erdma compat_mode=Y` recreates it with
the parameter), and failures carry the exact messages kmod prints, so the code that parses them
is tested against what a node says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from erdma.host.run import Result
from erdma.host.sysfs import read_int
from erdma.sim.fakehost import FakeHost

KERNEL_RELEASE = "5.10.134-17.3.al8.x86_64"
# The parameters each fake module accepts; the kernel ignores (and logs) any other.
MODULE_PARAMETERS = {"erdma": {"compat_mode": "N"}}


@dataclass
class KmodCommands:
    """Stateful kmod for a FakeHost; `installed` is the modules its module tree holds.

    `upstream=True` makes erdma the in-tree driver, which has no `compat_mode` parameter.
    """

    host: FakeHost
    installed: set[str] = field(default_factory=lambda: {"erdma", "smc", "smc_diag"})
    upstream: bool = False

    def __call__(self, argv: tuple[str, ...]) -> Result | None:
        if not argv:
            return None
        command, args = argv[0], argv[1:]
        if command == "modinfo" and len(args) == 1:
            return self.modinfo(argv, args[0])
        if command == "modprobe" and args:
            return self.modprobe(argv, args[0], args[1:])
        if command == "rmmod" and len(args) == 1:
            return self.rmmod(argv, args[0])
        return None

    def modinfo(self, argv: tuple[str, ...], name: str) -> Result:
        if name not in self.installed:
            return Result(argv, 1, "", f"modinfo: ERROR: Module {name} not found.\n")
        lines = [f"filename:       /lib/modules/{KERNEL_RELEASE}/extra/{name}.ko", f"name: {name}"]
        if not self.upstream:
            lines += [f"parm:           {p}:(bool)" for p in MODULE_PARAMETERS.get(name, {})]
        return Result(argv, 0, "\n".join(lines) + "\n")

    def modprobe(self, argv: tuple[str, ...], name: str, options: Iterable[str]) -> Result:
        if name not in self.installed:
            return Result(
                argv,
                1,
                "",
                f"modprobe: FATAL: Module {name} not found in directory "
                f"/lib/modules/{KERNEL_RELEASE}\n",
            )
        if self.host.module_loaded(name):
            return Result(argv, 0)  # already loaded: modprobe applies no parameters
        accepted = {} if self.upstream else dict(MODULE_PARAMETERS.get(name, {}))
        for option in options:
            key, _, value = option.partition("=")
            if key in accepted:
                accepted[key] = value
        self.host.load_module(name, accepted)
        return Result(argv, 0)

    def rmmod(self, argv: tuple[str, ...], name: str) -> Result:
        if not self.host.module_loaded(name):
            return Result(argv, 1, "", f"rmmod: ERROR: Module {name} is not currently loaded\n")
        refcnt = read_int(self.host.sys / "module" / name / "refcnt")
        if refcnt:
            return Result(argv, 1, "", f"rmmod: ERROR: Module {name} is in use\n")
        self.host.unload_module(name)
        return Result(argv, 0)
