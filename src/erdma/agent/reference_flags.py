"""The reference agent's command line, accepted with one warning per deprecated form.

A DaemonSet carried over from the reference starts our image with its arguments: Go's flag
syntax (``-flag``, ``--bool=true``), ``--deviceplugin-prestart-container`` and
``--erdma-installer-version``. Refusing them would crash-loop every node on day one; each is
translated to ours (or dropped, where ours has no equivalent) and named in a warning.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

#: reference flag -> ours
RENAMED = {"--deviceplugin-prestart-container": "--prestart-container"}
#: reference flags that take a value and have no equivalent here -> what to use instead
DROPPED = {
    "--erdma-installer-version": "set driverInstaller.version in the config file (chart "
    "value agent.driverInstaller.version; default 1.5.9, the reference's)",
}
TRUE = {"true", "t", "1", "yes"}
FALSE = {"false", "f", "0", "no"}
#: the reference's default for an unset or non-positive --jumbo-frame-mtu
REFERENCE_JUMBO_MTU = "8500"


def translate(args: Sequence[str], bool_flags: Collection[str]) -> tuple[list[str], list[str]]:
    """(our arguments, one warning per deprecated form found)."""
    out: list[str] = []
    warnings: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            out += [arg, *rest]
            break
        name, eq, value = arg.partition("=")
        if len(name) > 2 and name.startswith("-") and not name.startswith("--"):
            warnings.append(f"{name}: single-dash flags are deprecated; use -{name}")
            name = "-" + name
        if name in RENAMED:
            warnings.append(f"{name} is deprecated; use {RENAMED[name]}")
            name = RENAMED[name]
        if name in DROPPED:
            if not eq and rest:
                rest.pop(0)
            warnings.append(f"{name} is ignored: {DROPPED[name]}")
            continue
        if name == "--jumbo-frame-mtu":
            if not eq and rest:
                value, eq = rest.pop(0), "="
            if value.lstrip("-").isdigit() and int(value) <= 0:
                warnings.append(
                    f"{name}={value}: a value <= 0 is deprecated; read as the reference does, "
                    f"{REFERENCE_JUMBO_MTU}"
                )
                value = REFERENCE_JUMBO_MTU
        if name in bool_flags and eq and value.lower() in TRUE | FALSE:
            warnings.append(f"{name}={value}: deprecated form; use {name} or --no-{name[2:]}")
            out.append(name if value.lower() in TRUE else f"--no-{name[2:]}")
            continue
        out.append(f"{name}{eq}{value}")
    return out, warnings
