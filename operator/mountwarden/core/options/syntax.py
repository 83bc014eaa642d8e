"""The grammar of mount option strings, in every form users meet.

A StorageClass or PV ``mountOptions`` list (each entry may itself hold commas),
the 4th field of /proc/mounts, mountinfo super options and the ``opts:`` line of
mountstats all share one grammar: comma-separated ``name`` or ``name=value``
tokens, where a double-quoted value (SELinux ``context="a,b"``) may contain
commas. This module splits that grammar and nothing more; meaning lives in
:mod:`mountwarden.core.options.normalize`.
"""

from collections.abc import Iterable

OptionToken = tuple[str, str | None]


def split_option_string(text: str) -> list[str]:
    """Split on commas that are outside double quotes; strip blanks around tokens.

    Empty tokens (``a,,b``, a trailing comma) are dropped. An unterminated quote
    runs to the end of the string rather than raising: procfs text can be cut.
    """
    if '"' not in text:  # the common case, at C speed
        return [token for token in (part.strip() for part in text.split(",")) if token]
    tokens: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
            current.append(char)
        elif char == "," and not quoted:
            tokens.append("".join(current))
            current = []
        else:
            current.append(char)
    tokens.append("".join(current))
    return [token.strip() for token in tokens if token.strip()]


def parse_option_tokens(options: str | Iterable[str] | None) -> list[OptionToken]:
    """Parse options into ordered ``(name, value)`` pairs; ``value`` is None for flags.

    Accepts one string or a list of strings (a ``mountOptions`` list), and keeps
    the order, which matters: the kernel applies options left to right.
    """
    if options is None:
        return []
    entries = [options] if isinstance(options, str) else list(options)
    pairs: list[OptionToken] = []
    for entry in entries:
        for token in split_option_string(str(entry)):
            name, sep, value = token.partition("=")
            pairs.append((name.strip(), value.strip() if sep else None))
    return pairs


def format_option(name: str, value: str | int | bool | None) -> str:
    """Format one option back into mount syntax, so that splitting it again gives the same value.

    A parsed value keeps its quotes (``context="a,b"``) and so needs nothing; only a value
    with a comma outside quotes (one built in code) is wrapped in quotes.
    """
    if value is None or value is True:
        return name
    text = str(value)
    if _has_unquoted_comma(text):
        text = f'"{text}"'
    return f"{name}={text}"


def _has_unquoted_comma(text: str) -> bool:
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            return True
    return False
