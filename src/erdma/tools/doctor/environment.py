"""Doctor checks about what surrounds the devices: memlock, user space, OS image, SMC-R."""

from __future__ import annotations

import resource
import shlex
from pathlib import Path

from erdma.host.sysfs import read_text
from erdma.tools.doctor.model import DoctorContext, Outcome, Verdict, check

#: below this a registration of a few large buffers already fails; unlimited is recommended
MEMLOCK_MIN_BYTES = 64 * 1024 * 1024
CAP_IPC_LOCK = 14
PROVIDER_LIB_DIRS = (
    "usr/lib64/libibverbs",
    "usr/lib/libibverbs",
    "usr/lib/x86_64-linux-gnu/libibverbs",
    "usr/lib/aarch64-linux-gnu/libibverbs",
    "lib64/libibverbs",
    "lib/libibverbs",
    "usr/local/lib64/libibverbs",
    "usr/local/lib/libibverbs",
)
PROVIDER_DRIVER_FILE = "etc/libibverbs.d/erdma.driver"
INSTALL_PROVIDER = (
    "install the eRDMA user space from the eRDMA package mirror: apt install libibverbs1 "
    "ibverbs-providers ibverbs-utils librdmacm1, or yum install libibverbs ibverbs-providers "
    "ibverbs-utils librdmacm"
)

#: set by the aliyun/erdma device plugin in each container it gives a device (SMC-R's PNETID)
POD_PNET_ENV = "SMCR_PNET"

X86 = frozenset({"x86_64"})
ARM_AND_X86 = frozenset({"x86_64", "aarch64"})
#: eRDMA-supported ECS images: (os-release ID, VERSION_ID or its major part) -> name, arches
SUPPORTED_IMAGES: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    ("alinux", "3"): ("Alibaba Cloud Linux 3", ARM_AND_X86),
    ("alinux", "2"): ("Alibaba Cloud Linux 2", X86),
    ("ubuntu", "22.04"): ("Ubuntu 22.04", ARM_AND_X86),
    ("ubuntu", "24.04"): ("Ubuntu 24.04", ARM_AND_X86),
    ("ubuntu", "20.04"): ("Ubuntu 20.04", X86),
    ("ubuntu", "18.04"): ("Ubuntu 18.04", X86),
    ("centos", "8"): ("CentOS 8", X86),
    ("centos", "7"): ("CentOS 7", X86),
}
UNSUPPORTED_IDS = {"anolis": "Anolis OS"}


def _size(value: int) -> str:
    return f"{value // (1024 * 1024)} MiB" if value >= 1024 * 1024 else f"{value // 1024} KiB"


def _has_ipc_lock(proc: Path) -> bool:
    """Whether CapEff in <proc>/self/status holds CAP_IPC_LOCK, which lifts the memlock limit."""
    for line in (read_text(proc / "self" / "status") or "").splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
            except (IndexError, ValueError):
                return False
    return False


@check("memlock", "locked-memory limit")
def memlock(ctx: DoctorContext) -> Outcome:
    soft, _hard = ctx.memlock()
    if soft == resource.RLIM_INFINITY:
        return Outcome(Verdict.PASS, "RLIMIT_MEMLOCK is unlimited")
    if _has_ipc_lock(ctx.proc):
        return Outcome(
            Verdict.PASS, f"RLIMIT_MEMLOCK is {_size(soft)}, but CAP_IPC_LOCK lifts the limit"
        )
    remedy = (
        "docker run --ulimit memlock=-1 (or --cap-add=IPC_LOCK); in a pod add the IPC_LOCK "
        "capability; for the runtime itself set LimitMEMLOCK=infinity in its systemd unit"
    )
    if soft >= MEMLOCK_MIN_BYTES:
        return Outcome(
            Verdict.PASS,
            f"RLIMIT_MEMLOCK is {_size(soft)} (>= {_size(MEMLOCK_MIN_BYTES)}; unlimited is "
            "safer for large registrations)",
        )
    return Outcome(
        Verdict.FAIL,
        f"RLIMIT_MEMLOCK is {_size(soft)}, below {_size(MEMLOCK_MIN_BYTES)}: memory "
        "registration pins pages and will fail",
        remedy,
    )


@check("provider", "libibverbs erdma provider")
def provider(ctx: DoctorContext) -> Outcome:
    snapshot = ctx.snapshot
    if snapshot.devices and not snapshot.erdma_devices and not snapshot.modules.erdma_loaded:
        return Outcome(Verdict.SKIP, "no eRDMA devices here; the erdma provider is not needed")
    libs = sorted(
        str(Path("/", d, lib.name))
        for d in PROVIDER_LIB_DIRS
        for lib in ctx.root.path(d).glob("liberdma-rdmav*.so")
    )
    driver_file = ctx.root.path(PROVIDER_DRIVER_FILE)
    if not libs:
        return Outcome(
            Verdict.FAIL,
            "no liberdma-rdmav*.so in the libibverbs provider directories: "
            "libibverbs cannot see eRDMA devices",
            INSTALL_PROVIDER,
        )
    if not driver_file.is_file():
        return Outcome(
            Verdict.WARN,
            f"{', '.join(libs)} installed but /{PROVIDER_DRIVER_FILE} is missing: libibverbs "
            "loads providers named there",
            "reinstall ibverbs-providers (it ships /etc/libibverbs.d/erdma.driver)",
        )
    return Outcome(Verdict.PASS, f"{', '.join(libs)} and /{PROVIDER_DRIVER_FILE}")


def os_release(ctx: DoctorContext) -> dict[str, str] | None:
    """The fields of the root's os-release (the image's, in a container); None when absent."""
    for candidate in ("etc/os-release", "usr/lib/os-release"):
        text = read_text(ctx.root.path(candidate))
        if text is not None:
            fields: dict[str, str] = {}
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip():
                    parsed = shlex.split(value, comments=False) if value.strip() else [""]
                    fields[key.strip()] = parsed[0] if parsed else ""
            return fields
    return None


@check("os-image", "supported OS image")
def os_image(ctx: DoctorContext) -> Outcome:
    fields = os_release(ctx)
    if fields is None:
        return Outcome(
            Verdict.WARN,
            f"cannot read {ctx.root.path('etc/os-release')}: OS image unknown",
            "run doctor with --root pointing at the host's root filesystem",
        )
    os_id = fields.get("ID", "").lower()
    version = fields.get("VERSION_ID", "")
    pretty = fields.get("PRETTY_NAME") or f"{os_id} {version}".strip()
    if os_id in UNSUPPORTED_IDS:
        return Outcome(
            Verdict.FAIL,
            f"{pretty}: {UNSUPPORTED_IDS[os_id]} images are not supported by eRDMA",
            "use Alibaba Cloud Linux 3 or Ubuntu 22.04/24.04",
        )
    entry = SUPPORTED_IMAGES.get((os_id, version)) or SUPPORTED_IMAGES.get(
        (os_id, version.split(".")[0])
    )
    names = ", ".join(name for name, _ in SUPPORTED_IMAGES.values())
    if entry is None:
        return Outcome(
            Verdict.WARN,
            f"{pretty} is not in the eRDMA-supported image list ({names})",
            "eRDMA may still work; supported images are tested by the driver vendor",
        )
    name, arches = entry
    if ctx.machine not in arches:
        return Outcome(
            Verdict.WARN,
            f"{name} is supported on {'/'.join(sorted(arches))} only, not {ctx.machine}",
            "use Alibaba Cloud Linux 3 or Ubuntu 22.04/24.04 on ARM",
        )
    return Outcome(Verdict.PASS, f"{pretty} ({ctx.machine}) is a supported eRDMA image")


@check("smc-r", "SMC-R")
def smc_r(ctx: DoctorContext) -> Outcome:
    modules = ctx.snapshot.modules
    if not modules.smc_loaded:
        return Outcome(
            Verdict.WARN,
            "the smc module is not loaded: pods annotated network.alibabacloud.com/erdma-smcr "
            "get plain TCP (optional feature)",
            "modprobe smc (and smc_diag for smcss)",
        )
    if modules.netns_shared is False:
        return Outcome(
            Verdict.WARN,
            "ib_core netns_mode is exclusive: pods cannot reach RDMA devices for SMC-R",
            "boot with ib_core netns_mode=1 (shared)",
        )
    tcp2smc = ctx.proc / "sys" / "net" / "smc" / "tcp2smc"
    value = read_text(tcp2smc)
    if value is None:
        return Outcome(
            Verdict.WARN,
            f"smc loaded, but {tcp2smc} is absent: this kernel cannot switch a pod's TCP "
            "sockets to SMC-R",
            "SMC-R for annotated pods needs Alibaba Cloud Linux 3 with kernel >= 5.10.134-17",
        )
    if POD_PNET_ENV not in ctx.environ:
        return Outcome(Verdict.PASS, f"smc loaded; net.smc.tcp2smc present (host value {value})")
    # in a container holding an aliyun/erdma device: this network namespace is the pod's
    if value.strip() != "1":
        return Outcome(
            Verdict.WARN,
            f"this pod's net.smc.tcp2smc is {value.strip()}: its TCP stays TCP. A pod "
            'annotated network.alibabacloud.com/erdma-smcr: "true" gets SMC-R only where the '
            "chart's smcr.mode is webhook or prestart (off, also the Local-mode default, leaves "
            "it off and the API server warns at the pod's creation)",
            "annotate the pod, and set smcr.mode=webhook (Regular mode) or prestart on the "
            "release; kubectl describe pod shows whether smcr-init ran",
        )
    return Outcome(Verdict.PASS, "SMC-R is on in this pod (net.smc.tcp2smc=1)")
