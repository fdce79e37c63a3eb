"""Container Device Interface (CDI) specs for eRDMA devices, and how a device plugin names them.

A CDI spec lets containerd, CRI-O, Podman and Docker (>= 25) inject the eRDMA char devices by
name (`aliyun.com/erdma=erdma_0`) instead of by path, so a pod or `docker run --device` needs no
knowledge of which `uverbsN` belongs to which device. The spec is built from a DeviceSnapshot
only (no I/O), which keeps it testable and lets the agent and `erdma cdi generate` share it.

`cdiVersion` is the lowest version that knows every field used: `0.5.0`, because device nodes
carry `hostPath`. That is also the newest version Podman 4.3 (Debian 12, CDI library 0.5.x)
loads, so `COMPAT_MAX_VERSION` pins it: a new field that needs a later version must fail a test,
not silently cut off the oldest engine users run. Each device node carries its type and
major:minor from sysfs, so engines create the node without stat'ing `hostPath`.

Memory locking cannot be expressed in CDI except through an OCI hook that runs a binary on the
host, so the spec leaves it to the runtime: `docker run --ulimit memlock=-1`, a pod with
`IPC_LOCK`, or `LimitMEMLOCK=infinity` on the container runtime's service. `erdma doctor`
checks the limit a container actually got.
"""

from __future__ import annotations

import enum
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from erdma.host.model import CharDevice, DeviceSnapshot, RdmaDevice

VENDOR = "aliyun.com"
CLASS = "erdma"
KIND = f"{VENDOR}/{CLASS}"
ALL_DEVICES = "all"
SPEC_NAME = f"{VENDOR}-{CLASS}"  # file name stem, `<vendor>-<class>`, as the CDI spec asks
ANNOTATION_KEY = f"cdi.k8s.io/{CLASS}"
DEFAULT_OUTPUT_DIR = Path("/var/run/cdi")
FORMATS = ("yaml", "json")
#: the mode of the device node inside the container: any user may open it, as on the host
DEVICE_FILE_MODE = 0o666

#: the oldest cdiVersion that knows a field, from the CDI spec's version gates
VERSION_GATES: tuple[tuple[str, str], ...] = (
    ("hostPath", "0.5.0"),
    ("annotations", "0.6.0"),
    ("additionalGIDs", "0.7.0"),
    ("intelRdt", "0.7.0"),
    ("netDevices", "1.1.0"),
)
BASE_VERSION = "0.3.0"
#: the newest cdiVersion every supported engine loads (Podman 4.3 stops at 0.5.0)
COMPAT_MAX_VERSION = "0.5.0"
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


class DeviceListStrategy(enum.Enum):
    """How the device plugin tells the runtime which devices a container gets.

    `device-specs` lists the char devices in the Allocate response (works everywhere);
    `cdi-cdi-devices` fills ContainerAllocateResponse.cdi_devices (kubelet gate
    DevicePluginCDIDevices, GA in 1.31); `cdi-annotations` sets a `cdi.k8s.io/` annotation,
    which containerd >= 1.7 and CRI-O read on older kubelets.
    """

    DEVICE_SPECS = "device-specs"
    CDI_DEVICES = "cdi-cdi-devices"
    CDI_ANNOTATIONS = "cdi-annotations"

    @property
    def uses_cdi(self) -> bool:
        return self is not DeviceListStrategy.DEVICE_SPECS


def qualified_name(device: RdmaDevice | str) -> str:
    """`aliyun.com/erdma=erdma_0`: the name a runtime or `docker run --device` resolves."""
    name = device if isinstance(device, str) else device.name
    _check_name(name)
    return f"{KIND}={name}"


def cdi_device_names(devices: Iterable[RdmaDevice | str]) -> list[str]:
    """Fully qualified names, sorted, de-duplicated: ContainerAllocateResponse.cdi_devices."""
    return sorted({qualified_name(d) for d in devices})


def cdi_annotations(devices: Iterable[RdmaDevice | str]) -> dict[str, str]:
    """The container annotation form (`cdi.k8s.io/erdma: aliyun.com/erdma=erdma_0,...`)."""
    names = cdi_device_names(devices)
    return {ANNOTATION_KEY: ",".join(names)} if names else {}


class NoDevicesError(ValueError):
    """A CDI spec must hold at least one device, and the snapshot has no eRDMA device."""


def build_spec(snapshot: DeviceSnapshot, with_rdma_cm: bool = True) -> dict[str, Any]:
    """One CDI device per eRDMA device plus `all`; `rdma_cm` (when present) in common edits.

    `with_rdma_cm=False` leaves `rdma_cm` out, for driver modes whose workloads do not use it.
    The result depends only on the snapshot, so the same host always gives the same spec.
    """
    devices = sorted(snapshot.erdma_devices, key=lambda d: d.name)
    if not devices:
        raise NoDevicesError("no eRDMA devices in the snapshot; a CDI spec needs at least one")
    entries = [_device_entry(d.name, [d]) for d in devices]
    entries.append(_device_entry(ALL_DEVICES, devices))
    spec: dict[str, Any] = {"cdiVersion": BASE_VERSION, "kind": KIND, "devices": entries}
    if with_rdma_cm and snapshot.rdma_cm is not None and snapshot.rdma_cm.present:
        spec["containerEdits"] = {"deviceNodes": [_device_node(snapshot.rdma_cm)]}
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def device_env(devices: Sequence[RdmaDevice]) -> dict[str, str]:
    """The environment a container gets with these eRDMA devices, whichever way it got them:
    the `aliyun/erdma` device plugin's Allocate, the CDI spec (`build_spec`), `erdma docker
    args`, so a program reads the same variables in a pod and under a container engine.

    `ERDMA_DEVICES` names them in the order given; `SMCR_PNET` is the first PNETID among them,
    because SMC-R pairs one PNETID with the pod's netdev (`erdma smcr-init` reads it).
    """
    if not devices:
        return {}
    env = {"ERDMA_DEVICES": ",".join(d.name for d in devices)}
    pnetid = next((d.pnetid for d in devices if d.pnetid), None)
    if pnetid:
        env["SMCR_PNET"] = pnetid
    return env


def _device_entry(name: str, devices: list[RdmaDevice]) -> dict[str, Any]:
    _check_name(name)
    edits: dict[str, Any] = {"deviceNodes": [_device_node(d.uverbs) for d in devices]}
    edits["env"] = [f"{key}={value}" for key, value in device_env(devices).items()]
    return {"name": name, "containerEdits": edits}


def _device_node(char: CharDevice) -> dict[str, Any]:
    node: dict[str, Any] = {"path": char.path, "hostPath": char.path}
    if char.major is not None and char.minor is not None:
        node.update(type="c", major=char.major, minor=char.minor)
    node.update(permissions="rw", fileMode=DEVICE_FILE_MODE)
    return node


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(
            f"device name {name!r} cannot be a CDI device name: letters, digits, '_', '-' and "
            "'.' only, starting and ending with a letter or digit"
        )


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest cdiVersion that accepts every field the spec uses (runtimes reject less)."""
    used = set(_keys(spec))
    versions = [version for key, version in VERSION_GATES if key in used]
    return max([BASE_VERSION, *versions], key=_semver)


def _keys(value: object) -> Iterable[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def render_spec(spec: Mapping[str, Any], fmt: str = "yaml") -> str:
    """The spec as YAML or JSON text, byte-stable for the same spec."""
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    if fmt == "yaml":
        # imported here: the agent's default strategy never writes a spec, and PyYAML is
        # about 1 MiB of its resident memory
        import yaml

        return yaml.safe_dump(dict(spec), sort_keys=False, default_flow_style=False)
    raise ValueError(f"invalid --format {fmt!r}: accepted values are {', '.join(FORMATS)}")


def spec_path(output_dir: Path, fmt: str = "yaml") -> Path:
    """`<dir>/aliyun.com-erdma.yaml` (or .json)."""
    return output_dir / f"{SPEC_NAME}.{fmt}"


def write_spec(spec: Mapping[str, Any], output_dir: Path, fmt: str = "yaml") -> Path:
    """Write the spec atomically: a runtime reading the directory sees the old file or the new.

    The temporary file lives in the same directory so the rename never crosses filesystems, and
    is named `.<stem>.*.tmp`: engines load only `*.yaml`/`*.json`, so they never parse it, even
    when a crash leaves it behind. The spec in the other format is then removed: beside it,
    every device would be defined twice in one directory, which engines refuse for every
    device of the kind ("unresolvable CDI devices"). The directory is fsynced so the rename
    and the removal survive a power cut.
    """
    text = render_spec(spec, fmt)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = spec_path(output_dir, fmt)
    fd, tmp = tempfile.mkstemp(prefix=f".{SPEC_NAME}.", suffix=".tmp", dir=output_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for other in FORMATS:
        if other != fmt:
            spec_path(output_dir, other).unlink(missing_ok=True)
    _fsync_dir(output_dir)
    return target


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename is done anyway
        pass
    finally:
        os.close(fd)
