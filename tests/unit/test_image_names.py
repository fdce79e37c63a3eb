"""Where the image goes and what the docs call it: one name, the chart's default.

`make image` tags docker.io/erdma-k8s/erdma:<version> and `make push REGISTRY=R` pushes
R/erdma-k8s/erdma:<version>, so `--set agent.image.repository=R/erdma-k8s/erdma` is all a
mirror needs. These run without an engine: `push --dry-run` prints the commands it would run
(tests/integration/test_image_runs.py pushes to a real registry where one can run).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy/helm/erdma-controller"
#: a mention of the image: an optional registry/ prefix, the path, an optional :tag or @digest
MENTION = re.compile(r"[\w.:<>-]*/?erdma(?:-k8s)?/erdma(?=[:@\s`'\")\]]|$)", re.MULTILINE)


def chart_default() -> str:
    repository = yaml.safe_load((CHART / "values.yaml").read_text())["agent"]["image"]["repository"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    return f"{repository}:{app_version}"


def push(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts/image.py"), "push", "--dry-run", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_make_image_builds_the_charts_default_and_push_sends_it_there():
    done = push()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"docker push {chart_default()}"]


def test_push_to_a_registry_keeps_the_charts_path_under_it():
    done = push("--registry", "registry.example.com:5000/")
    assert done.returncode == 0, done.stderr
    mirrored = chart_default().replace("docker.io/", "registry.example.com:5000/", 1)
    assert done.stdout.splitlines() == [
        f"docker tag {chart_default()} {mirrored}",
        f"docker push {mirrored}",
    ]


def test_a_registry_given_as_a_url_is_refused_with_the_form_wanted():
    done = push("--registry", "https://registry.example.com")
    assert done.returncode == 1 and done.stdout == ""
    assert "REGISTRY='https://registry.example.com': give host[:port][/path], not a URL" in (
        done.stderr
    )


def test_every_doc_names_the_image_as_the_chart_does():
    """docker.io/erdma-k8s/erdma, or a mirror of that path as `make push REGISTRY=` makes it."""
    repository = chart_default().rsplit(":", 1)[0]
    allowed = [
        repository.replace("docker.io/", registry, 1)
        for registry in ("docker.io/", "registry.example.com/", "<registry>/")
    ]
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    wrong = [
        f"{doc.relative_to(REPO)}: {mention}"
        for doc in docs
        for mention in MENTION.findall(doc.read_text())
        if mention not in allowed
    ]
    assert wrong == []


def test_install_doc_says_how_the_image_is_built_and_pushed():
    install = (REPO / "docs/install.md").read_text()
    section = install.split("## The image", 1)[1].split("\n## ", 1)[0]
    for said in ("make image", "make push REGISTRY=", "make lock"):
        assert said in section
    assert re.search(r"The image is \d+ MB", section), "the measured size is missing"
