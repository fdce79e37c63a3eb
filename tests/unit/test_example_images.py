"""The example images (examples/images/*/Dockerfile): each one is a Dockerfile a builder
accepts, installs exactly the packages the table in docs/docker-cdi.md lists, needs only the
build arguments the table names, and is the one `erdma doctor` points at for its OS."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from erdma.tools.doctor import image
from tests.dockerfiles import DockerfileError, load, parse

ROOT = Path(__file__).resolve().parents[2]
IMAGES = sorted((ROOT / "examples/images").glob("*/Dockerfile"))
DOCS = ROOT / "docs/docker-cdi.md"
SECTION = "## Container images with the eRDMA user space"
_LINK = re.compile(r"\]\(\.\./(examples/images/[^)]+/Dockerfile)\)")
_ARG = re.compile(r"`([A-Z_]+)`(?: \(`([^`]*)`\))?")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def docs_table() -> dict[str, tuple[dict[str, str | None], list[str]]]:
    """Dockerfile path -> (build arguments with their documented default, packages)."""
    text = DOCS.read_text()
    assert SECTION in text, f"{_rel(DOCS)} lost its section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[dict[str, str | None], list[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        link = _LINK.search(cells[1]) if len(cells) == 4 else None
        if link:
            args = {name: default or None for name, default in _ARG.findall(cells[2])}
            rows[link.group(1)] = (args, cells[3].strip("`").split())
    return rows


def installed_packages(path: Path) -> list[str]:
    """The packages the ERDMA_PACKAGES argument holds, checked to be what the install runs."""
    dockerfile = load(path)
    packages = dockerfile.args["ERDMA_PACKAGES"]
    assert packages, f"{_rel(path)}: ERDMA_PACKAGES has no default"
    (run,) = [i for i in dockerfile.all("RUN") if "${ERDMA_PACKAGES}" in i.text]
    assert re.search(r"(yum|apt-get) install [^&]*\$\{ERDMA_PACKAGES\}", run.text), run.text
    return packages.split()


def test_there_is_an_image_per_os_family() -> None:
    assert [p.parent.name for p in IMAGES] == ["ubuntu", "yum"]


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.parent.name)
def test_every_dockerfile_parses(path: Path) -> None:
    dockerfile = load(path)
    first = next(i for i in dockerfile.instructions if i.keyword != "ARG")
    assert first.keyword == "FROM"
    assert len(dockerfile.all("FROM")) == 1
    # the mirror is never written into the file: it is the user's choice of host
    assert dockerfile.args["ERDMA_MIRROR"] is None


YUM_SOURCE = (
    "[erdma]\\nname = ERDMA Repository\\nbaseurl = %s/erdma/yum/%s/erdma/%s/\\ngpgcheck = 0"
    '\\nenabled = 1\\n\' "${ERDMA_MIRROR}" "${ERDMA_YUM_DIR}" "${ERDMA_ARCH}" > '
    "/etc/yum.repos.d/erdma.repo",
    "yum install --disablerepo=* --enablerepo erdma -y ${ERDMA_PACKAGES}",
)
APT_SOURCE = (
    'curl -fsSL "${ERDMA_MIRROR}/erdma/GPGKEY" | apt-key add -',
    'echo "deb [ arch=${ERDMA_APT_ARCH}${signed_by} ] ${ERDMA_MIRROR}/erdma/apt/ubuntu '
    '${VERSION_CODENAME}/erdma main" > /etc/apt/sources.list.d/erdma.list',
)


@pytest.mark.parametrize(("family", "source"), [("ubuntu", APT_SOURCE), ("yum", YUM_SOURCE)])
def test_each_image_adds_the_repository_the_documents_give(family: str, source: tuple[str, ...]):
    (run,) = load(ROOT / "examples/images" / family / "Dockerfile").all("RUN")
    for fragment in source:
        assert fragment in run.text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("RUN true\nFROM ubuntu\n", "line 1: RUN before the first FROM (only ARG may)"),
        ("FROM ubuntu\nINSTALL libibverbs1\n", "line 2: unknown instruction 'INSTALL'"),
        ("FROM ubuntu:${RELEASE}\n", "line 1: FROM uses undeclared RELEASE"),
        ("# only a comment\nARG A=1\n", "no FROM instruction"),
        ("FROM ubuntu\nRUN apt-get update \\\n", "line 2: the last instruction ends in a line"),
    ],
)
def test_the_parser_refuses_what_a_builder_refuses(text: str, problem: str) -> None:
    with pytest.raises(DockerfileError, match=re.escape(problem)):
        parse(text)


def test_the_docs_table_lists_every_image() -> None:
    assert sorted(docs_table()) == [_rel(p) for p in IMAGES]


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.parent.name)
def test_each_image_installs_the_packages_the_docs_table_lists(path: Path) -> None:
    _args, packages = docs_table()[_rel(path)]
    assert installed_packages(path) == packages


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.parent.name)
def test_the_docs_table_names_every_build_argument_the_image_needs(path: Path) -> None:
    documented, _packages = docs_table()[_rel(path)]
    declared = load(path).args
    for name, default in documented.items():
        assert name in declared, f"docs name {name}, which {_rel(path)} does not declare"
        assert declared[name] == default, f"{name}: docs say {default!r}"
    required = [name for name, default in declared.items() if default is None]
    assert sorted(required) == sorted(n for n, d in documented.items() if d is None)


def test_the_packages_are_those_of_the_erdma_user_documents() -> None:
    """apt and yum names as the documents give them; the doctor names the same ones."""
    apt = ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"]
    yum = ["libibverbs", "ibverbs-providers", "ibverbs-utils", "librdmacm"]
    by_family = {p.parent.name: installed_packages(p) for p in IMAGES}
    assert by_family == {"ubuntu": apt, "yum": yum}
    assert list(image.APT_PACKAGES) == apt and list(image.YUM_PACKAGES) == yum


@pytest.mark.parametrize(
    ("fields", "family", "build_arg"),
    [
        ({"ID": "alinux", "VERSION_ID": "3"}, "yum", "BASE_IMAGE=<registry>/alinux3/"),
        ({"ID": "alinux", "VERSION_ID": "2.1903"}, "yum", "BASE_IMAGE=<registry>/alinux2/"),
        ({"ID": "centos", "VERSION_ID": "7"}, "yum", "BASE_IMAGE=centos:7"),
        ({"ID": "centos", "VERSION_ID": "8"}, "yum", "BASE_IMAGE=centos:8"),
        ({"ID": "centos", "VERSION_ID": "7"}, "yum", "ERDMA_YUM_DIR=redhat/7"),
        ({"ID": "centos", "VERSION_ID": "8"}, "yum", "ERDMA_YUM_DIR=redhat/8"),
        *(
            ({"ID": "ubuntu", "VERSION_ID": v}, "ubuntu", f"UBUNTU_RELEASE={v}")
            for v in ("18.04", "20.04", "22.04", "24.04")
        ),
    ],
)
def test_the_doctor_points_at_an_example_that_builds_with_its_arguments(
    fields: dict[str, str], family: str, build_arg: str
) -> None:
    example = image.example_for(fields)
    assert example is not None and example.path == f"examples/images/{family}/Dockerfile"
    declared = load(ROOT / example.path).args
    words = shlex.split(example.build())
    assert words[:3] == ["docker", "build", f"examples/images/{family}"]
    given = [words[i + 1].split("=")[0] for i, w in enumerate(words) if w == "--build-arg"]
    assert set(given) <= set(declared) and build_arg.split("=")[0] in given
    assert any(w.startswith(build_arg) for w in words)
    # every argument the image needs is given
    assert {n for n, d in declared.items() if d is None} <= set(given)


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.parent.name)
def test_a_missing_required_argument_stops_the_build_naming_it(path: Path) -> None:
    """FROM refuses a blank base image itself; every other required argument is tested first."""
    dockerfile = load(path)
    (run,) = dockerfile.all("RUN")
    for name in (n for n, d in dockerfile.args.items() if d is None):
        if name != "BASE_IMAGE":
            assert f'test -n "${{{name}}}"' in run.text, f"{_rel(path)}: {name} is not checked"
            assert f'echo "pass --build-arg {name}=<' in run.text, f"{_rel(path)}: {name}"
