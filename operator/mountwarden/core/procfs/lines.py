"""The line loop every line-oriented /proc format shares: parse each line, count the ones that fail."""

from collections.abc import Callable
from typing import TypeVar

Parsed = TypeVar("Parsed")


def parse_lines(
    text: str, parse_line: Callable[[str, int], Parsed | None], *, strip_end: bool = True
) -> tuple[tuple[Parsed, ...], tuple[int, ...]]:
    """The well-formed lines' values, and the 1-based numbers of the lines ``parse_line`` refused.

    Blank lines are neither. Only "\\n" ends a line: str.splitlines() would also split on
    \\x0c or \\u2028, which the kernel leaves unescaped inside paths.
    """
    values: list[Parsed] = []
    skipped: list[int] = []
    for line_number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        value = parse_line(line.rstrip() if strip_end else line, line_number)
        if value is None:
            skipped.append(line_number)
        else:
            values.append(value)
    return tuple(values), tuple(skipped)
