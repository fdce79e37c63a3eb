"""Doctor check: does this root (in a container, the image) hold the eRDMA user-space packages?

A container given /dev/infiniband/uverbsN still sees no eRDMA device unless its image has
libibverbs and the erdma provider. The check names what is missing, the packages that carry it
under the image's package manager, and the example Dockerfile (examples/images/) for the image's
OS, read from its os-release, so the fix is one `docker build` away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from erdma.tools.doctor.environment import PROVIDER_LIB_DIRS, os_release
from erdma.tools.doctor.model import DoctorContext, Outcome, Verdict, check

LIB_DIRS = (
    "usr/lib64",
    "usr/lib",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/local/lib64",
    "usr/local/lib",
)
BIN_DIRS = ("usr/bin", "bin", "usr/local/bin")
EXAMPLES = "examples/images"
MIRROR_ARG = "--build-arg ERDMA_MIRROR=<eRDMA package mirror>"
UBUNTU_RELEASES = ("18.04", "20.04", "22.04", "24.04")
#: the eRDMA user documents name no yum directory for Alibaba Cloud Linux
YUM_DIR_UNNAMED = "<mirror directory for this OS>"
APT_LIKE = frozenset({"debian", "ubuntu"})
YUM_LIKE = frozenset({"alinux", "centos", "rhel", "fedora", "anolis"})


@dataclass(frozen=True)
class Component:
    """One piece of the user space: the file that shows it is there, the package holding it,
    and what breaks without it. `required` pieces are what every verbs application loads (FAIL
    without them); the others only some applications and the checks by hand need (WARN)."""

    label: str
    dirs: tuple[str, ...]
    pattern: str
    apt: str
    yum: str
    effect: str
    required: bool

    def found(self, ctx: DoctorContext) -> str | None:
        """The first matching path, as seen inside the root."""
        for directory in self.dirs:
            for hit in sorted(ctx.root.path(directory).glob(self.pattern)):
                return str(Path("/", directory, hit.name))
        return None

    def package(self, manager: str | None) -> str:
        """Its package under `manager`; both names when the manager is unknown and they differ."""
        if manager == "apt" or self.apt == self.yum:
            return self.apt
        return self.yum if manager == "yum" else f"{self.apt}/{self.yum}"


INVISIBLE = "applications here cannot see eRDMA devices"
#: in the order the eRDMA user documents list the packages
COMPONENTS = (
    Component(
        "libibverbs.so.1",
        LIB_DIRS,
        "libibverbs.so.1*",
        apt="libibverbs1",
        yum="libibverbs",
        effect=INVISIBLE,
        required=True,
    ),
    Component(
        "erdma provider liberdma-rdmav*.so",
        PROVIDER_LIB_DIRS,
        "liberdma-rdmav*.so",
        apt="ibverbs-providers",
        yum="ibverbs-providers",
        effect=INVISIBLE,
        required=True,
    ),
    Component(
        "ibv_devices",
        BIN_DIRS,
        "ibv_devices",
        apt="ibverbs-utils",
        yum="ibverbs-utils",
        effect="the device cannot be checked by hand (ibv_devices, ibv_devinfo)",
        required=False,
    ),
    Component(
        "librdmacm.so.1",
        LIB_DIRS,
        "librdmacm.so.1*",
        apt="librdmacm1",
        yum="librdmacm",
        effect="rdma_cm applications cannot connect",
        required=False,
    ),
)
APT_PACKAGES = tuple(c.apt for c in COMPONENTS)
YUM_PACKAGES = tuple(c.yum for c in COMPONENTS)


@dataclass(frozen=True)
class Example:
    """The example Dockerfile for an OS family, with the build arguments this image needs."""

    path: str
    build_args: str
    manager: str  # "apt" or "yum"

    def build(self) -> str:
        directory = self.path.rsplit("/", 1)[0]
        return f"docker build {directory} {self.build_args} {MIRROR_ARG}"


def _yum_example(base_image: str, yum_dir: str) -> Example:
    """The yum-family example: one Dockerfile, its base image and mirror directory per OS."""
    args = f"--build-arg BASE_IMAGE={base_image} --build-arg ERDMA_YUM_DIR={yum_dir}"
    return Example(f"{EXAMPLES}/yum/Dockerfile", args, "yum")


def example_for(fields: Mapping[str, str]) -> Example | None:
    """The example matching os-release `fields`; None for an OS the examples do not cover."""
    os_id = fields.get("ID", "").lower()
    version = fields.get("VERSION_ID", "")
    major = version.split(".")[0]
    if os_id == "alinux" and major in ("2", "3"):
        return _yum_example(f"<registry>/alinux{major}/alinux{major}:<tag>", YUM_DIR_UNNAMED)
    if os_id == "centos" and major in ("7", "8"):
        return _yum_example(f"centos:{major}", f"redhat/{major}")
    if os_id == "ubuntu" and version in UBUNTU_RELEASES:
        args = f"--build-arg UBUNTU_RELEASE={version}"
        return Example(f"{EXAMPLES}/ubuntu/Dockerfile", args, "apt")
    return None


def manager_for(fields: Mapping[str, str]) -> str | None:
    """apt or yum, from the example or else from ID and ID_LIKE; None when neither fits."""
    example = example_for(fields)
    if example is not None:
        return example.manager
    ids = {fields.get("ID", "").lower(), *fields.get("ID_LIKE", "").lower().split()}
    if ids & APT_LIKE:
        return "apt"
    return "yum" if ids & YUM_LIKE else None


def _os_name(fields: Mapping[str, str] | None) -> str:
    if fields is None:
        return "an image without /etc/os-release"
    named = fields.get("PRETTY_NAME") or f"{fields.get('ID', '')} {fields.get('VERSION_ID', '')}"
    return named.strip() or "this OS"


def remedy(fields: Mapping[str, str] | None) -> str:
    """The example to build for this OS, or the install command when no example covers it."""
    example = example_for(fields or {})
    if example is not None:
        packages = APT_PACKAGES if example.manager == "apt" else YUM_PACKAGES
        return (
            f"build the image from {example.path} of erdma-k8s ({example.build()}), which "
            f"installs {' '.join(packages)} from the eRDMA package mirror (docs/docker-cdi.md)"
        )
    install = {
        "apt": f"apt-get install {' '.join(APT_PACKAGES)}",
        "yum": f"yum install {' '.join(YUM_PACKAGES)}",
    }
    manager = manager_for(fields or {})
    commands = [install[manager]] if manager else list(install.values())
    return (
        f"{EXAMPLES}/ of erdma-k8s has no Dockerfile for {_os_name(fields)} (it covers Alibaba "
        "Cloud Linux 2/3, CentOS 7/8, Ubuntu 18.04-24.04); install from the eRDMA package "
        "mirror: " + ", or ".join(commands)
    )


@check("user-space", "eRDMA user-space packages")
def user_space(ctx: DoctorContext) -> Outcome:
    snapshot = ctx.snapshot
    if snapshot.devices and not snapshot.erdma_devices and not snapshot.modules.erdma_loaded:
        return Outcome(Verdict.SKIP, "no eRDMA devices here; the eRDMA user space is not needed")
    found = {c: c.found(ctx) for c in COMPONENTS}
    missing = [c for c, path in found.items() if path is None]
    if not missing:
        return Outcome(Verdict.PASS, "installed: " + ", ".join(p for p in found.values() if p))
    fields = os_release(ctx)
    manager = manager_for(fields or {})
    named = ", ".join(f"{c.label} ({c.package(manager)})" for c in missing)
    if any(c.required for c in missing):
        return Outcome(Verdict.FAIL, f"missing {named}: {INVISIBLE}", remedy(fields))
    effects = "; ".join(c.effect for c in missing)
    return Outcome(Verdict.WARN, f"missing {named}: {effects}", remedy(fields))
