"""Build the one container image offline from locked inputs, re-lock those inputs, push it.

`make image` runs `build`, `make lock` runs `lock`, `make push REGISTRY=...` runs `push`.

The image's contents follow from files in this repository, and it builds where only package
registries are reachable: each input is fetched by its ordinary client, checked against a lock
in deploy/docker/ and cached under /var/tmp/erdma-image; the engine then builds with no network.

- Root file system: Debian bookworm by mmdebstrap with exactly the versions of debian.lock (a
  mirror that no longer serves one fails the build, naming `make lock`), imported as a base
  image. Cached as a tarball keyed by the lock and this recipe: the step that costs minutes.
- Python dependencies: the wheels of requirements.lock, hash-checked by pip when downloaded and
  again when installed; pip itself (pip.lock) runs from its wheel and is never installed.
- The project's wheel, built from the working tree.

An image built from the same inputs (a sha256 over them and this script, in a label) is
reused.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from image_debian import PACKAGES, SUITE, DebianLock, base_tarball, mmdebstrap
from image_steps import (
    CACHE,
    DEBIAN_LOCK,
    DOCKER_DIR,
    PIP_LOCK,
    PYTHON_LOCK,
    REPO,
    ImageError,
    cache_locked,
    run,
    sha256,
)

#: the chart's default agent.image.repository is DEFAULT_REGISTRY/REPOSITORY
DEFAULT_REGISTRY = "docker.io"
REPOSITORY = "erdma-k8s/erdma"
INPUTS_LABEL = "io.erdma-k8s.inputs"
STAGE_LABEL = "io.erdma-k8s.stage=install"  # on the Dockerfile's install stage
BASE_REPOSITORY = "localhost/erdma-k8s/erdma-base"
#: the scripts an image follows from (with the Dockerfile): a change to any rebuilds it
RECIPE = tuple(
    Path(__file__).parent / f"{name}.py" for name in ("image", "image_debian", "image_steps")
)


def version() -> str:
    """The project's version, which is the image's tag (and the chart's appVersion)."""
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def default_tag(registry: str = DEFAULT_REGISTRY) -> str:
    return f"{registry}/{REPOSITORY}:{version()}"


# -- Python ---------------------------------------------------------------------------------
def pip_download(lock: Path, dest: Path, debian: DebianLock, *, index: bool) -> None:
    """The wheels of `lock` for the base's Python and glibc, hash-checked; from the wheel cache
    only, or (`index`) from the package index into it."""
    major, minor = debian.glibc()
    arch = platform.machine()
    platforms = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    platforms += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    py = debian.python()
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--require-hashes",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        py,
        "--implementation",
        "cp",
        "--abi",
        "cp" + py.replace(".", ""),
        *(f"--platform={p}" for p in platforms),
        "-d",
        str(dest),
        "-r",
        str(lock),
    ]
    if not index:
        argv += ["--no-index", "--find-links", str(CACHE / "wheels")]
    run(argv, capture_output=True)


def wheels(dest: Path, debian: DebianLock) -> None:
    """Both locks' wheels into `dest`: from the cache, downloading only what it lacks."""
    for lock in (PYTHON_LOCK, PIP_LOCK):
        try:
            pip_download(lock, dest, debian, index=False)
        except ImageError:
            print(f"image: downloading the wheels of {lock.name}")
            pip_download(lock, CACHE / "wheels", debian, index=True)
            pip_download(lock, dest, debian, index=False)


def project_wheel(dest: Path, epoch: int) -> Path:
    """The project's wheel from the working tree, with every timestamp at `epoch`."""
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        tree = Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, tree / name)
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(REPO / "src", tree / "src", ignore=skip)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(dest),
                str(tree),
            ],
            env=env,
            capture_output=True,
        )
    (wheel,) = dest.glob("erdma_k8s-*.whl")
    return wheel


# -- the engine -----------------------------------------------------------------------------
def docker(*args: str) -> str:
    return run(["docker", *args], capture_output=True).stdout.strip()


def drop(*images: str) -> None:
    """Remove images this script made and no longer uses; one still in use (tagged elsewhere,
    a container's) stays, and that is fine."""
    for image in images:
        subprocess.run(["docker", "rmi", image], capture_output=True, check=False)


def base_ref(key: str) -> str:
    return f"{BASE_REPOSITORY}:{key[:16]}"


def base_image(tarball: Path, key: str) -> str:
    """The root file system as an image of the engine (`docker import`), once per key."""
    if not docker("image", "ls", "-q", base_ref(key)):
        docker("import", str(tarball), base_ref(key))
    return base_ref(key)


def build(tag: str, iidfile: Path | None) -> None:
    """Build (or find, by its inputs) the image, tag it `tag`, write its ID to `iidfile`."""
    docker("version", "-f", "{{.Server.Version}}")  # a missing engine fails here, not later
    debian = DebianLock.read()
    with cache_locked(), tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        context = Path(tmp)
        (context / "wheels").mkdir()
        base_key = debian.key()
        wheel = project_wheel(context / "wheels", debian.epoch)
        recipe = (DOCKER_DIR / "Dockerfile").read_bytes(), *(p.read_bytes() for p in RECIPE)
        key = sha256(
            *recipe, base_key, PYTHON_LOCK.read_bytes(), PIP_LOCK.read_bytes(), wheel.read_bytes()
        )
        found = docker("image", "ls", "-q", "--no-trunc", "--filter", f"label={INPUTS_LABEL}={key}")
        previous = docker("image", "ls", "-q", "--no-trunc", tag)
        if found:
            image = found.split()[0]
            print(f"image: {tag} is up to date (inputs {key[:16]})")
        else:
            started = time.monotonic()
            base = base_image(base_tarball(debian, base_key), base_key)
            wheels(context / "wheels", debian)
            for source in (PYTHON_LOCK, PIP_LOCK, DOCKER_DIR / "Dockerfile"):
                shutil.copy2(source, context / source.name)
            print(f"image: building {tag} (no network)")
            run(
                [
                    "docker",
                    "build",
                    "-q",
                    "--force-rm",
                    "--network=none",
                    "--build-arg",
                    f"BASE_IMAGE={base}",
                    "--label",
                    f"{INPUTS_LABEL}={key}",
                    "--label",
                    f"org.opencontainers.image.version={version()}",
                    "-t",
                    tag,
                    str(context),
                ],
                capture_output=True,
            )
            image = docker("image", "inspect", "-f", "{{.Id}}", tag)
            print(f"image: built in {time.monotonic() - started:.0f} s")
            # the install stage's images: the classic builder keeps them as its cache
            drop(*docker("image", "ls", "-a", "-q", "--filter", f"label={STAGE_LABEL}").split())
        docker("tag", image, tag)
        if previous and previous != image:
            drop(previous)
        bases = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", BASE_REPOSITORY)
        drop(*(ref for ref in bases.split() if ref != base_ref(base_key)))
    size = int(docker("image", "inspect", "-f", "{{.Size}}", image))
    print(f"image: {tag} {image[:19]} {size / 1e6:.0f} MB")
    if iidfile is not None:
        iidfile.write_text(image)


# -- lock and push --------------------------------------------------------------------------
def lock() -> None:
    """Re-resolve every lock: Debian's newest versions of the suite, PyPI's for pyproject.toml."""
    uv = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if uv is None:
        raise ImageError("uv is not installed (`make lock` installs it into .venv)")
    epoch = int(time.time())
    with cache_locked(), tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        partial = Path(tmp) / "base.tar"
        versions = mmdebstrap(partial, epoch, pins=None)
        debian = DebianLock(SUITE, tuple(PACKAGES), epoch, versions)
        DEBIAN_LOCK.write_text(debian.text())
        key = debian.key()
        for old in CACHE.glob("base-*.tar"):
            old.unlink()
        partial.rename(CACHE / f"base-{key}.tar")
    compile_ = [
        uv,
        "pip",
        "compile",
        "-q",
        "--generate-hashes",
        "--universal",
        "--only-binary",
        ":all:",
        "--python-version",
        debian.python(),
        "--custom-compile-command",
        "make lock",
    ]
    run([*compile_, "pyproject.toml", "-o", str(PYTHON_LOCK.relative_to(REPO))], cwd=REPO)
    run([*compile_, "-", "-o", str(PIP_LOCK.relative_to(REPO))], cwd=REPO, input="pip\n")
    print(f"lock: {DEBIAN_LOCK.name}, {PYTHON_LOCK.name}, {PIP_LOCK.name} rewritten")


def push_commands(source: str, registry: str) -> list[list[str]]:
    """Tag `source` as REGISTRY/erdma-k8s/erdma:<version>, the chart's default path under
    that registry, and push it."""
    registry = registry.rstrip("/")
    if not registry or "://" in registry:
        raise ImageError(f"REGISTRY={registry!r}: give host[:port][/path], not a URL")
    target = default_tag(registry)
    tag = [] if target == source else [["docker", "tag", source, target]]
    return [*tag, ["docker", "push", target]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build, or reuse an image of the same inputs")
    build_cmd.add_argument("--tag", default=default_tag())
    build_cmd.add_argument("--iidfile", type=Path, help="write the image ID here")
    commands.add_parser("lock", help="rewrite deploy/docker/*.lock from the registries")
    push_cmd = commands.add_parser("push", help="tag for REGISTRY and push")
    push_cmd.add_argument("--registry", default=DEFAULT_REGISTRY)
    push_cmd.add_argument("--image", default=default_tag(), help="the local image to push")
    push_cmd.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.tag, args.iidfile)
        elif args.command == "lock":
            lock()
        else:
            for command in push_commands(args.image, args.registry):
                print(shlex.join(command))
                if not args.dry_run:
                    subprocess.run(command, check=True)
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"{Path(__file__).name} {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
