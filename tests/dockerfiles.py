"""A small Dockerfile reader for the example images: no engine can build them offline, so the
tests check what a builder would refuse before it downloads anything (an unknown instruction,
an instruction other than ARG before the first FROM, a FROM naming an undeclared argument)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

#: the instructions of the Dockerfile reference
KNOWN = frozenset(
    [
        "FROM",
        "RUN",
        "CMD",
        "LABEL",
        "EXPOSE",
        "ENV",
        "ADD",
        "COPY",
        "ENTRYPOINT",
        "VOLUME",
        "USER",
        "WORKDIR",
        "ARG",
        "ONBUILD",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "MAINTAINER",
    ]
)
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


class DockerfileError(ValueError):
    """What a builder would reject, with the line it is on."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str
    line: int


@dataclass(frozen=True)
class Dockerfile:
    instructions: tuple[Instruction, ...]
    #: every ARG, name -> default (None without one), in declaration order
    args: dict[str, str | None]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text): comments dropped, continuations joined."""
    out: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not parts:
            start = number
        parts.append(stripped.removesuffix("\\").strip())
        if not stripped.endswith("\\"):
            out.append((start, " ".join(parts)))
            parts = []
    if parts:
        raise DockerfileError(f"line {start}: the last instruction ends in a line continuation")
    return out


def _arg(text: str, line: int) -> tuple[str, str | None]:
    (word,) = shlex.split(text) or [""]
    name, sep, default = word.partition("=")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise DockerfileError(f"line {line}: ARG {text!r} does not declare a name")
    return name, default if sep else None


def parse(text: str) -> Dockerfile:
    """The instructions of `text`; DockerfileError for what a builder would refuse."""
    instructions: list[Instruction] = []
    args: dict[str, str | None] = {}
    for line, logical in _logical_lines(text):
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise DockerfileError(f"line {line}: unknown instruction {keyword!r}")
        seen_from = any(i.keyword == "FROM" for i in instructions)
        if not seen_from and keyword not in ("ARG", "FROM"):
            raise DockerfileError(f"line {line}: {keyword} before the first FROM (only ARG may)")
        if keyword == "FROM":
            undeclared = [v for v in _VARIABLE.findall(rest) if v not in args]
            if undeclared:
                raise DockerfileError(f"line {line}: FROM uses undeclared {', '.join(undeclared)}")
        if keyword == "ARG":
            name, default = _arg(rest, line)
            args[name] = default if default is not None else args.get(name)
        instructions.append(Instruction(keyword, rest.strip(), line))
    if not any(i.keyword == "FROM" for i in instructions):
        raise DockerfileError("no FROM instruction")
    return Dockerfile(tuple(instructions), args)


def load(path: Path) -> Dockerfile:
    return parse(path.read_text())
