"""The image's root file system: Debian by mmdebstrap, exactly the versions of debian.lock.

Bootstrapping takes minutes, so the tarball is cached, keyed by the lock, the recipe below and
the tool's version; a mirror that no longer serves a locked version fails, naming `make lock`.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from image_steps import CACHE, DEBIAN_LOCK, ImageError, run, sha256

SUITE = "bookworm"
#: what the image needs from Debian, and why; their dependencies come along
PACKAGES = {
    "python3": "the interpreter of every program (the suite's 3.11, with its security updates)",
    "libstdc++6": "the C++ runtime that grpcio's manylinux wheel links against",
    "libibverbs1": "verbs library: `erdma doctor` in a pod checks that it can see the devices",
    "ibverbs-providers": "the erdma and mlx5 providers that libibverbs loads",
    "ibverbs-utils": "ibv_devices and ibv_devinfo, to look at a device by hand",
    "librdmacm1": "rdma_cm, which `erdma doctor` expects beside libibverbs",
    "kmod": "modinfo, modprobe, rmmod for `erdma driver prepare` without agent.hostNamespace",
}
#: no manuals, translations, docs (the copyright files stay) or glibc's iconv modules (Python
#: has its own codecs): nothing in the image reads them
DPKG_OPTIONS = (
    *(
        f"path-exclude={p}/*"
        for p in (
            "/usr/lib/*/gconv",
            "/usr/share/man",
            "/usr/share/locale",
            "/usr/share/info",
            "/usr/share/lintian",
            "/usr/share/doc",
        )
    ),
    "path-include=/usr/share/doc/*/copyright",
)
#: run on the finished tree: no lock pins left, no host files, the user the image runs as
CUSTOMIZE = (
    'rm -f "$1/etc/apt/preferences.d/erdma.pref"',
    ': > "$1/etc/resolv.conf"',
    ': > "$1/etc/hostname"',
    'echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >> "$1/etc/passwd"',
    'echo "nonroot:x:65532:" >> "$1/etc/group"',
    'install -d -o 65532 -g 65532 -m 0755 "$1/home/nonroot"',
)
MMDEBSTRAP = (
    "--variant=essential",  # Essential: yes and PACKAGES; no apt in the image
    "--mode=auto",  # root here, user namespaces otherwise
    "--format=tar",
    "--skip=output/dev",  # the engine makes /dev
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",  # usr-is-merged, not usrmerge's perl
    f"--include={','.join(PACKAGES)}",
    *(f"--dpkgopt={option}" for option in DPKG_OPTIONS),
    *(f"--customize-hook={hook}" for hook in CUSTOMIZE),
)


@dataclass(frozen=True)
class DebianLock:
    """deploy/docker/debian.lock: the suite, the packages asked for, the timestamp every file
    gets (SOURCE_DATE_EPOCH), and every installed package as name=version."""

    suite: str
    include: tuple[str, ...]
    epoch: int
    versions: dict[str, str]

    @classmethod
    def read(cls, path: Path = DEBIAN_LOCK) -> DebianLock:
        text = path.read_text()  # its comment lines hold no "="
        header = dict(re.findall(r"^# ([a-z-]+): (.*)$", text, re.MULTILINE))
        return cls(
            header["suite"],
            tuple(header["include"].split()),
            int(header["source-date-epoch"]),
            parse_listing(text),
        )

    def text(self) -> str:
        return (
            "# The Debian packages of the image's root file system; `make lock` rewrites this.\n"
            f"# suite: {self.suite}\n# include: {' '.join(self.include)}\n"
            f"# source-date-epoch: {self.epoch}\n"
            + "".join(f"{name}={ver}\n" for name, ver in sorted(self.versions.items()))
        )

    def key(self) -> str:
        """What the root file system follows from: the lock, the recipe, the tool's version."""
        tool = run(["mmdebstrap", "--version"], capture_output=True).stdout.strip()
        return sha256(self.text(), json.dumps(MMDEBSTRAP), tool, platform.machine())

    def python(self) -> str:
        """The base's Python as major.minor ("3.11"), which the wheels must be built for."""
        return ".".join(self.versions["python3"].split(".")[:2])

    def glibc(self) -> tuple[int, int]:
        major, minor = re.findall(r"^(\d+)\.(\d+)", self.versions["libc6"])[0]
        return int(major), int(minor)

    def pins(self) -> str:
        """apt preferences holding every package at its locked version."""
        return "".join(
            f"Package: {name}\nPin: version {ver}\nPin-Priority: 1001\n\n"
            for name, ver in sorted(self.versions.items())
        )


def parse_listing(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def mmdebstrap(target: Path, epoch: int, pins: str | None) -> dict[str, str]:
    """Bootstrap the root file system into the tarball `target`; what got installed."""
    listing = target.with_suffix(".list")
    hooks = [
        f"--customize-hook=chroot \"$1\" dpkg-query -W -f='${{Package}}=${{Version}}\\n'"
        f" > {shlex.quote(str(listing))}"
    ]
    if pins is not None:
        pref = target.with_suffix(".pref")
        pref.write_text(pins)
        into = '"$1/etc/apt/preferences.d"'
        hooks.append(
            f"--setup-hook=mkdir -p {into} && cp {shlex.quote(str(pref))} {into}/erdma.pref"
        )
    print(f"image: Debian {SUITE} root file system with mmdebstrap (minutes, once per lock)")
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    run(["mmdebstrap", *MMDEBSTRAP, *hooks, SUITE, str(target)], env=env, capture_output=True)
    return parse_listing(listing.read_text())


def base_tarball(lock: DebianLock, key: str) -> Path:
    """The cached root file system of `lock`, bootstrapped and checked against it if absent."""
    if lock.include != tuple(PACKAGES) or lock.suite != SUITE:
        raise ImageError(
            f"{DEBIAN_LOCK.name} was made for {lock.suite} {' '.join(lock.include)},"
            f" not {SUITE} {' '.join(PACKAGES)}: run `make lock`"
        )
    tarball = CACHE / f"base-{key}.tar"
    if tarball.exists():
        return tarball
    partial = CACHE / f"partial-{key}.tar"
    partial.unlink(missing_ok=True)
    got = mmdebstrap(partial, lock.epoch, lock.pins())
    if got != lock.versions:
        changed = sorted(
            f"{n} {lock.versions.get(n, '-')} -> {got.get(n, '-')}"
            for n in set(got) | set(lock.versions)
            if got.get(n) != lock.versions.get(n)
        )
        raise ImageError(
            f"the Debian mirror no longer serves {DEBIAN_LOCK.name}'s versions "
            f"({'; '.join(changed[:8])}): run `make lock`"
        )
    for old in [*CACHE.glob("base-*.tar"), *CACHE.glob("partial-*.*")]:
        if old != partial:
            old.unlink()
    partial.rename(tarball)
    return tarball
