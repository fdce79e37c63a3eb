"""Read the Markdown docs: fenced blocks, runnable `console` transcripts, links and headings.

The convention (described for writers in docs/development.md, "Runnable commands in the docs"):

- a fenced block with the info string ``console`` is run: each ``$ `` line is a command (a
  trailing ``\\`` continues it), the lines after it up to the next ``$ `` line are its expected
  output (stdout and stderr together); a line ``...`` matches any number of lines, ``...`` inside
  a line matches any text in that line, and a last line ``[exit N]`` gives the exit status
  (default 0);
- the commands of one file run in order, in one scratch directory that replaces every
  ``/tmp/erdma-`` path, with a clean environment in which ``erdma`` and ``python3`` are this
  project's;
- only the programs in ``ALLOWED_PROGRAMS`` may appear in a ``console`` command, and ``$ ``
  prompts may appear only in ``console`` blocks and in ``text`` blocks (transcripts from a real
  node, not run).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import erdma

#: programs a `console` command may run (each command of a pipeline is checked)
ALLOWED_PROGRAMS = frozenset(
    {"erdma", "python3", "python", "echo", "printf", "cat", "head", "tail", "grep", "sort"}
)
#: fenced blocks that may hold `$ ` prompts: run (`console`) or shown only (`text`)
PROMPT_BLOCKS = frozenset({"console", "text"})
#: every path with this prefix is moved into the file's scratch directory
SCRATCH_PREFIX = "/tmp/erdma-"
COMMAND_TIMEOUT = 120.0

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
_EXIT = re.compile(r"^\[exit (\d+)\]$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_OPERATORS = frozenset({"|", "||", "&&", ";", "&", "|&"})
_CODE_SPAN = re.compile(r"`[^`]*`")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class DocError(Exception):
    """A docs block that breaks the convention; the message starts with `file:line:`."""


@dataclass(frozen=True)
class Block:
    path: str
    line: int  # line of the opening fence, 1-based
    info: str
    body: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    path: str
    line: int  # line of the `$ ` prompt, 1-based
    command: str
    expected: tuple[str, ...]
    exit_code: int = 0


@dataclass
class Outcome:
    command: Command
    exit_code: int
    output: str
    problems: list[str] = field(default_factory=list)

    def report(self) -> str:
        cmd = self.command
        expected = "\n".join(cmd.expected) or "(no output)"
        return (
            f"{cmd.path}:{cmd.line}: $ {cmd.command}\n"
            f"  {'; '.join(self.problems)}\n"
            f"  --- expected (exit {cmd.exit_code})\n{_indent(expected)}\n"
            f"  --- actual (exit {self.exit_code})\n{_indent(self.output or '(no output)')}"
        )


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


# --- parsing ----------------------------------------------------------------------------------
def fenced_blocks(text: str, path: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info, start = match.group(2), match.group(3), i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise DocError(f"{path}:{start + 1}: fenced block is never closed")
        blocks.append(Block(path, start + 1, info, tuple(body)))
        i += 1
    return blocks


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for every line outside fenced blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            yield number, line


def console_commands(block: Block) -> list[Command]:
    """The commands of one `console` block, with their expected output and exit status."""
    where = f"{block.path}:{block.line}"
    commands: list[Command] = []
    i = 0
    body = block.body
    if body and not body[0].startswith("$ "):
        raise DocError(f"{where}: a console block must start with a `$ ` command: {body[0]!r}")
    if not body:
        raise DocError(f"{where}: empty console block")
    while i < len(body):
        line_no = block.line + 1 + i
        parts = [body[i][2:]]
        while parts[-1].endswith("\\") and i + 1 < len(body):
            i += 1
            parts.append(body[i])
        command = "\n".join(parts)
        i += 1
        expected: list[str] = []
        while i < len(body) and not body[i].startswith("$ "):
            expected.append(body[i].rstrip())
            i += 1
        while expected and not expected[-1]:
            expected.pop()
        exit_code = 0
        if expected and (m := _EXIT.match(expected[-1])):
            exit_code = int(m.group(1))
            expected.pop()
        check_runnable(command, f"{block.path}:{line_no}")
        commands.append(Command(block.path, line_no, command, tuple(expected), exit_code))
    return commands


def check_runnable(command: str, where: str) -> None:
    """Refuse a command the docs tests cannot run here (cluster tools, command substitution)."""
    if "`" in command or "$(" in command:
        raise DocError(f"{where}: command substitution is not allowed in console blocks: {command}")
    lexer = shlex.shlex(command.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise DocError(f"{where}: cannot parse command ({exc}): {command}") from None
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    for segment in segments:
        words = [w for w in segment if not _ASSIGNMENT.match(w)]
        if not words:
            raise DocError(f"{where}: empty command in: {command}")
        if words[0] not in ALLOWED_PROGRAMS:
            raise DocError(
                f"{where}: {words[0]!r} cannot run without a cluster or host setup; put it in "
                f"an `sh` block without `$ ` (console blocks may run: "
                f"{', '.join(sorted(ALLOWED_PROGRAMS))})"
            )


def commands_in(text: str, path: str) -> list[Command]:
    """Every runnable command of a Markdown file; DocError for any block breaking the rules."""
    commands: list[Command] = []
    for block in fenced_blocks(text, path):
        if block.info == "console":
            commands.extend(console_commands(block))
        elif block.info not in PROMPT_BLOCKS:
            for offset, line in enumerate(block.body, 1):
                if line.startswith("$ "):
                    raise DocError(
                        f"{path}:{block.line + offset}: `$ ` prompt in a "
                        f"{block.info or 'plain'!r} block: make it a `console` block (run by "
                        f"the tests) or drop the prompt"
                    )
    return commands


# --- matching and running -----------------------------------------------------------------------
def _normalize(output: str) -> str:
    lines = [line.rstrip() for line in output.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "".join(line + "\n" for line in lines)


def output_matches(expected: tuple[str, ...] | list[str], output: str) -> bool:
    pattern = []
    for line in expected:
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(r"[^\n]*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.fullmatch("".join(pattern), _normalize(output)) is not None


class Session:
    """One docs file's commands: a scratch directory, shims for `erdma`/`python3`, a clean env."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="erdma-docs-")
        self.scratch = Path(self._tmp.name)
        self.work = self.scratch / "work"
        self.work.mkdir()
        bindir = self.scratch / "bin"
        bindir.mkdir()
        python = sys.executable
        (bindir / "erdma").write_text(
            f"#!{python}\nimport sys\nfrom erdma.cli import main\nsys.exit(main())\n"
        )
        for name in ("python3", "python"):
            (bindir / name).write_text(f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        for shim in bindir.iterdir():
            shim.chmod(0o755)
        source_root = Path(erdma.__file__).resolve().parents[1]
        system_path = os.environ.get("PATH", "/usr/bin:/bin")
        self.env = {
            "PATH": f"{bindir}{os.pathsep}{system_path}",
            "HOME": str(self.work),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "COLUMNS": "80",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(source_root),
        }

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        self._tmp.cleanup()

    def run(self, command: Command) -> Outcome:
        local = f"{self.scratch}/erdma-"
        shell = command.command.replace(SCRATCH_PREFIX, local)
        try:
            proc = subprocess.run(
                ["bash", "-o", "pipefail", "-c", shell],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
            exit_code, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or b""
            text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            exit_code, output = -1, text + f"\n(timed out after {COMMAND_TIMEOUT:.0f} s)"
        output = _normalize(output.replace(local, SCRATCH_PREFIX)).rstrip("\n")
        outcome = Outcome(command, exit_code, output)
        if exit_code != command.exit_code:
            outcome.problems.append(f"exit status {exit_code}, expected {command.exit_code}")
        if not output_matches(command.expected, output):
            outcome.problems.append("output does not match")
        return outcome


def run_commands(commands: list[Command]) -> list[Outcome]:
    """Run one file's commands in order; return the outcomes that failed."""
    with Session() as session:
        return [o for o in map(session.run, commands) if o.problems]


# --- links and headings -----------------------------------------------------------------------
def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result: set[str] = set()
    for _, line in prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path, root: Path) -> list[str]:
    """`file:line: reason` for every relative link or anchor in `path` that leads nowhere."""
    text = path.read_text()
    rel = path.relative_to(root).as_posix()
    problems: list[str] = []
    for number, line in prose_lines(text):
        for match in _LINK.finditer(_CODE_SPAN.sub("``", line)):  # `[a](b)` in code is no link
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{rel}:{number}: link to missing file {target!r}")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                problems.append(f"{rel}:{number}: link to missing heading {target!r}")
    return problems
