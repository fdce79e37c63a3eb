"""The README is a front door, the docs' links lead somewhere, and every `console` block runs.

The convention for runnable blocks is in docs/development.md ("Runnable commands in the docs")
and tests/docs_support.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import docs_support as docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN = [README, *DOCS]
README_LIMIT = 15 * 1024
GENERATED = ("agent settings", "controller settings")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- the front door ---------------------------------------------------------------------------
def test_readme_is_a_front_door_under_15_kb() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move detail to docs/ (limit 15 KB)"


def test_readme_starts_with_make_demo_and_make_test() -> None:
    head = README.read_text().splitlines()[:40]
    for target in ("make demo", "make test"):
        assert any(target in line for line in head), f"`{target}` not in README's first 40 lines"


def test_readme_links_every_docs_page() -> None:
    text = README.read_text()
    missing = [_rel(p) for p in DOCS if f"]({_rel(p)}" not in text]
    assert not missing, f"README.md does not link to: {', '.join(missing)}"


@pytest.mark.parametrize("path", MARKDOWN, ids=_rel)
def test_relative_links_and_anchors_resolve(path: Path) -> None:
    problems = docs.broken_links(path, ROOT)
    assert not problems, "\n".join(problems)


def test_configuration_keeps_the_generated_regions() -> None:
    text = (ROOT / "docs/configuration.md").read_text()
    lines = text.splitlines()
    for name in GENERATED:
        begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
        assert lines.count(begin) == 1 and lines.count(end) == 1, f"markers for {name!r}"
        region = lines[lines.index(begin) + 1 : lines.index(end)]
        assert any(line.startswith("| `") for line in region), f"no table between {name!r} markers"


# --- every console block runs -------------------------------------------------------------------
@pytest.mark.parametrize("path", MARKDOWN, ids=_rel)
def test_console_blocks_run_and_print_what_the_docs_show(path: Path) -> None:
    commands = docs.commands_in(path.read_text(), _rel(path))
    failures = docs.run_commands(commands)
    assert not failures, "\n\n".join(f.report() for f in failures)


def test_the_docs_run_the_tools_people_use() -> None:
    """The runnable examples cover the commands that work without a cluster."""
    shown = [c.command for path in MARKDOWN for c in docs.commands_in(path.read_text(), _rel(path))]
    for needle in (
        "erdma sim",
        "erdma devices --root",
        "--json",
        "erdma docker args",
        "erdma docker run",
        "erdma cdi generate",
        "erdma doctor --root",
        "erdma smcr-init",
        "erdma agent",
        "erdma controller",
    ):
        assert any(needle in command for command in shown), f"no console example runs {needle!r}"


# --- the checks themselves fail on bad input ------------------------------------------------------
def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.md"
    path.write_text(text)
    return path


def test_output_that_no_longer_matches_names_the_file_and_line() -> None:
    text = "# Doc\n\n```console\n$ erdma devices --root /tmp/erdma-none\nerdma_7  erdma\n```\n"
    commands = docs.commands_in(text, "docs/bad.md")
    failures = docs.run_commands(commands)
    assert len(failures) == 1
    report = failures[0].report()
    assert report.startswith("docs/bad.md:4: $ erdma devices --root /tmp/erdma-none")
    assert "output does not match" in report
    assert "Directory '/tmp/erdma-none' does not exist." in report  # the actual output is shown


def test_a_wrong_exit_status_fails() -> None:
    text = "```console\n$ erdma agent --slots-per-device 0\nerdma agent: ...\n```\n"
    (failure,) = docs.run_commands(docs.commands_in(text, "x.md"))
    assert failure.problems == ["exit status 2, expected 0"]
    assert failure.command.line == 2


def test_a_command_needing_a_cluster_is_refused() -> None:
    text = "text\n\n```console\n$ erdma devices\n$ kubectl get pods\n```\n"
    with pytest.raises(docs.DocError, match=r"^docs/x\.md:5: 'kubectl' cannot run"):
        docs.commands_in(text, "docs/x.md")
    piped = "```console\n$ erdma devices | helm template\n```\n"
    with pytest.raises(docs.DocError, match="'helm' cannot run"):
        docs.commands_in(piped, "x.md")
    substituted = "```console\n$ echo $(docker ps)\n```\n"
    with pytest.raises(docs.DocError, match="command substitution"):
        docs.commands_in(substituted, "x.md")


def test_a_console_block_without_a_command_is_refused() -> None:
    with pytest.raises(docs.DocError, match=r"^x\.md:1: a console block must start with"):
        docs.commands_in("```console\nsome output\n```\n", "x.md")


def test_a_prompt_outside_console_and_text_blocks_is_refused() -> None:
    with pytest.raises(docs.DocError, match=r"^x\.md:3: `\$ ` prompt in a 'sh' block"):
        docs.commands_in("```sh\nhelm list\n$ erdma devices\n```\n", "x.md")
    assert docs.commands_in("```text\n$ erdma doctor\nPASS\n```\n", "x.md") == []


def test_wildcards_and_exit_markers() -> None:
    (cmd,) = docs.commands_in(
        "```console\n$ erdma x \\\n  --y\na\n...\nb ... d\n[exit 3]\n```\n", "x"
    )
    assert cmd.command == "erdma x \\\n  --y" and cmd.exit_code == 3
    assert docs.output_matches(cmd.expected, "a\nb c d\n")
    assert docs.output_matches(cmd.expected, "a\n1\n2\nb c c d   \n\n")
    assert not docs.output_matches(cmd.expected, "a\nb c\n")
    assert not docs.output_matches(cmd.expected, "a\nb c d\nextra\n")
    assert docs.output_matches((), "")
    assert not docs.output_matches((), "unexpected\n")


def test_scratch_paths_stay_in_the_session(tmp_path: Path) -> None:
    probe = f"/tmp/erdma-probe-{tmp_path.name}"
    text = f"```console\n$ echo hi > {probe}\n$ cat {probe}\nhi\n$ echo {probe}\n{probe}\n```\n"
    assert docs.run_commands(docs.commands_in(text, "x.md")) == []
    assert not Path(probe).exists()


def test_broken_links_and_anchors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Shared RDMA: `rdma/hca` on nodes\n")
    path = _write(
        tmp_path,
        "# Bad\n\n[ok](other.md#shared-rdma-rdmahca-on-nodes) [self](#bad)\n"
        "[gone](missing.md) [anchor](other.md#nowhere) [web](https://example.com)\n"
        "```sh\n[not a link](nowhere.md)\n```\n",
    )
    assert docs.broken_links(path, tmp_path) == [
        "bad.md:4: link to missing file 'missing.md'",
        "bad.md:4: link to missing heading 'other.md#nowhere'",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "Regular mode: the controller and the `ERdmaDevice` object",
            "regular-mode-the-controller-and-the-erdmadevice-object",
        ),
        ("Controller `config.json`", "controller-configjson"),
        ("Path 1 (default): PreStartContainer", "path-1-default-prestartcontainer"),
        (
            "Registering the webhooks, and `failurePolicy`",
            "registering-the-webhooks-and-failurepolicy",
        ),
        ("rdma_cm and snake_case", "rdma_cm-and-snake_case"),
    ],
)
def test_github_slugs(heading: str, anchor: str) -> None:
    assert docs.slug(heading) == anchor
    assert re.fullmatch(r"[\w-]+", anchor)


def test_duplicate_headings_get_numbered_anchors() -> None:
    assert docs.anchors("# A\n## Metrics\n## Metrics\n```\n# not a heading\n```\n") == {
        "a",
        "metrics",
        "metrics-1",
    }
