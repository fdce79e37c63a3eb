"""Doctor checks about the RDMA devices themselves: sysfs, ports, char nodes, driver, rdma_cm."""

from __future__ import annotations

from erdma.host.devnodes import probe_node
from erdma.host.driver import DriverMode
from erdma.host.model import DeviceSnapshot
from erdma.tools.doctor.model import DoctorContext, Outcome, Verdict, check

LOAD_DRIVER = (
    "install and load the eRDMA driver (modprobe erdma) on an instance type with eRDMA and an "
    "Elastic RDMA Interface (ERI) attached"
)
NO_ERI = "attach an ERI to the instance and check `dmesg | grep erdma`"
PASS_NODES = (
    "on the host: modprobe ib_uverbs rdma_ucm (udev creates /dev/infiniband/*); in a container: "
    "docker run $(erdma docker args) or request aliyun/erdma in the pod"
)


def driver_mode(snapshot: DeviceSnapshot) -> DriverMode | None:
    """DEFAULT (iWARP, rdma_cm connections) or COMPAT (RoCE-style); None without erdma.

    The out-of-tree driver says so in compat_mode; the upstream driver has no such parameter, so
    the node type of its devices decides (CA = RoCE-style, RNIC = iWARP).
    """
    modules = snapshot.modules
    if modules.compat_mode is not None:
        return DriverMode.for_compat_mode(modules.compat_mode)
    types = {d.node_type for d in snapshot.erdma_devices}
    if types == {"CA"}:
        return DriverMode.COMPAT
    if modules.erdma_loaded or snapshot.erdma_devices:
        return DriverMode.DEFAULT
    return None


@check("rdma-devices", "RDMA devices in sysfs")
def rdma_devices(ctx: DoctorContext) -> Outcome:
    snapshot = ctx.snapshot
    where = ctx.root.sys / "class" / "infiniband"
    skipped = "; ".join(f"{s.name}: {s.reason}" for s in snapshot.skipped)
    if not snapshot.devices:
        remedy = NO_ERI if snapshot.modules.erdma_loaded else LOAD_DRIVER
        extra = f" (unusable: {skipped})" if skipped else ""
        return Outcome(Verdict.FAIL, f"no RDMA devices in {where}{extra}", remedy)
    listed = ", ".join(f"{d.name} ({d.driver or 'unknown driver'})" for d in snapshot.devices)
    message = f"{len(snapshot.devices)} RDMA device(s): {listed}"
    if skipped:
        return Outcome(
            Verdict.WARN,
            f"{message}; unusable: {skipped}",
            "load ib_uverbs so each device gets a uverbs node",
        )
    return Outcome(Verdict.PASS, message)


@check("ports", "port state")
def ports(ctx: DoctorContext) -> Outcome:
    devices = ctx.snapshot.devices
    if not devices:
        return Outcome(Verdict.SKIP, "no RDMA devices, no ports to check")
    down = [
        f"{d.name} port {p.number} {p.state} ({p.phys_state}; netdev {d.netdev or '?'})"
        for d in devices
        for p in d.ports
        if not p.active
    ]
    if down:
        netdevs = sorted({d.netdev for d in devices if d.netdev and not d.active})
        up = "; ".join(f"ip link set {n} up" for n in netdevs) or "bring the paired netdev up"
        return Outcome(
            Verdict.FAIL, "not active: " + ", ".join(down), f"{up} (the port follows its carrier)"
        )
    return Outcome(Verdict.PASS, "all ports ACTIVE: " + ", ".join(d.name for d in devices))


@check("char-devices", "uverbs nodes open read-write")
def char_devices(ctx: DoctorContext) -> Outcome:
    devices = ctx.snapshot.devices
    if not devices:
        return Outcome(Verdict.SKIP, "no RDMA devices in sysfs, no uverbs nodes to open")
    probes = {d.name: probe_node(ctx.root, d.uverbs) for d in devices}
    usable = [f"{p.path} ({name})" for name, p in probes.items() if p.ok]
    missing = [f"{p.path} ({name})" for name, p in probes.items() if p.missing]
    broken = [
        f"{p.path} ({name}) {p.problem}"
        for name, p in probes.items()
        if p.problem and not p.missing
    ]
    if broken:
        return Outcome(
            Verdict.FAIL,
            "; ".join(broken),
            "load the driver behind the node (modprobe ib_uverbs), re-create stale nodes "
            "(udevadm trigger), and give the container access (docker --device / aliyun/erdma)",
        )
    if not usable:
        return Outcome(Verdict.FAIL, "missing: " + ", ".join(missing), PASS_NODES)
    if missing:
        return Outcome(
            Verdict.WARN,
            f"usable: {', '.join(usable)}; not in this /dev: {', '.join(missing)} "
            "(expected in a container given only some devices)",
            PASS_NODES,
        )
    return Outcome(Verdict.PASS, "open read-write: " + ", ".join(usable))


@check("driver", "erdma driver and mode")
def driver(ctx: DoctorContext) -> Outcome:
    snapshot = ctx.snapshot
    mode = driver_mode(snapshot)
    if mode is None:
        others = sorted({d.driver or "?" for d in snapshot.devices})
        if others:
            return Outcome(
                Verdict.SKIP, f"no erdma driver; RDMA devices here use {', '.join(others)}"
            )
        return Outcome(
            Verdict.FAIL,
            "the erdma kernel module is not loaded (no /sys/module/erdma)",
            LOAD_DRIVER,
        )
    compat = snapshot.modules.compat_mode
    if compat is None:
        source = "upstream driver (no compat_mode parameter), judged by node type"
    else:
        source = f"compat_mode={'Y' if compat else 'N'}"
    use = "RoCE-style GIDs for NCCL" if mode.compat_mode else "iWARP with rdma_cm, for SMC-R"
    message = f"erdma loaded, mode {mode.value} ({source}: {use})"
    if not snapshot.erdma_devices:
        return Outcome(
            Verdict.WARN,
            message + "; but no eRDMA device registered",
            NO_ERI,
        )
    return Outcome(Verdict.PASS, message)


@check("rdma-cm", "rdma_cm for the driver mode")
def rdma_cm(ctx: DoctorContext) -> Outcome:
    snapshot = ctx.snapshot
    mode = driver_mode(snapshot)
    if mode is None:
        return Outcome(Verdict.SKIP, "no erdma driver; rdma_cm expectations depend on its mode")
    cm = snapshot.rdma_cm
    probe = probe_node(ctx.root, cm) if cm is not None else None
    if mode.compat_mode:
        if probe is None or probe.missing:
            return Outcome(
                Verdict.PASS,
                "rdma_cm absent; compat mode does not need it (NCCL exchanges connection data "
                "over TCP)",
            )
        if probe.ok:
            return Outcome(Verdict.PASS, f"{probe.path} opens (not needed in compat mode)")
        return Outcome(
            Verdict.WARN,
            f"{probe.path} {probe.problem} (compat mode does not need it)",
            "modprobe rdma_ucm if rdma_cm-based applications run here",
        )
    remedy = (
        "modprobe rdma_ucm; in a container pass --device=/dev/infiniband/rdma_cm "
        "(erdma docker args adds it)"
    )
    if probe is None:
        return Outcome(
            Verdict.FAIL,
            "default mode needs rdma_cm, and this host has none (no /sys/class/misc/rdma_cm)",
            remedy,
        )
    if probe.ok:
        return Outcome(Verdict.PASS, f"{probe.path} opens read-write (needed in default mode)")
    return Outcome(
        Verdict.FAIL, f"default mode needs rdma_cm: {probe.path} {probe.problem}", remedy
    )
