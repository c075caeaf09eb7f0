"""Lines the migration writes, at the file's line length.

The limit is the project's (``line-length`` of ruff or black in ``pyproject.toml``,
``ruff.toml`` or ``.ruff.toml``; ``max-line-length`` of flake8 in ``setup.cfg``, ``tox.ini``
or ``.flake8``; the nearest folder above the file that sets one), else the longest line the
file already has, and never under black's 88. Only lines the input does not have are
wrapped: code split at its last bracket pair, black's way (the contents on their own lines,
one item per line with a trailing comma when they still do not fit; a condition too long for
its ``if`` in parentheses, split before its ``and``/``or``), a comment at word boundaries (a
marker stays one line: ``markers`` reads it so); each split is kept only where the file still
parses to the same tree.
"""

from __future__ import annotations

import ast
import configparser
import io
import re
import textwrap
import tokenize
from functools import lru_cache
from pathlib import Path

from fsdp2_port.codemods.markers import PREFIX
from fsdp2_port.codemods.text import Edit, LineIndex, apply

#: black's default, the floor of an inferred limit.
DEFAULT = 88
_OPEN, _CLOSE = "([{", ")]}"
_SECTION = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_LINE_LENGTH = re.compile(r"^\s*line-length\s*=\s*(\d+)\s*(#.*)?$")


def line_length(path: str, original: str) -> int:
    """The limit for ``path``: its project's setting, else what the file already uses."""
    configured = _configured(Path(path).resolve().parent)
    if configured is not None:
        return configured
    return max([DEFAULT, *(len(line) for line in original.splitlines())])


@lru_cache(maxsize=256)
def _configured(folder: Path) -> int | None:
    for candidate in (folder, *folder.parents):
        found = _setting(candidate)
        if found is not None:
            return found
        if (candidate / ".git").exists():
            return None
    return None


def _setting(folder: Path) -> int | None:
    for name, sections in (
        ("pyproject.toml", ("tool.ruff", "tool.black")),
        ("ruff.toml", ("",)),
        (".ruff.toml", ("",)),
    ):
        value = _toml_line_length(folder / name, sections)
        if value is not None:
            return value
    for name in ("setup.cfg", "tox.ini", ".flake8"):
        value = _ini(folder / name)
        if value is not None:
            return value
    return None


def _toml_line_length(path: Path, sections: tuple[str, ...]) -> int | None:
    """``line-length = N`` in one of ``sections`` of a TOML file ("" for its top level),
    read line by line (Python 3.10 has no TOML reader)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    section = ""
    for line in text.splitlines():
        header = _SECTION.match(line)
        if header:
            section = header[1].strip().replace('"', "")
            continue
        found = _LINE_LENGTH.match(line)
        if found and section in sections and int(found[1]) > 0:
            return int(found[1])
    return None


def _ini(path: Path) -> int | None:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
        value = parser.get("flake8", "max-line-length", fallback=None)
        return int(value) if value is not None and int(value) > 0 else None
    except (OSError, UnicodeDecodeError, configparser.Error, ValueError):
        return None


def edits(original: str, text: str, limit: int) -> list[Edit]:
    """Replacements of the lines of ``text`` longer than ``limit`` that ``original`` lacks,
    each kept only where the text still parses to the same tree."""
    before = set(original.splitlines())
    physical = text.splitlines(keepends=True)
    newline = LineIndex(text).newline()
    candidates = []
    offset = 0
    for number, whole in enumerate(physical, 1):
        line = whole.rstrip("\r\n")
        if len(line) > limit and line not in before and not _continued(physical, number):
            wrapped = _comment(line, limit) if line.lstrip().startswith("#") else _code(line, limit)
            if wrapped is not None and wrapped != [line]:
                candidates.append(Edit(offset, offset + len(line), newline.join(wrapped)))
        offset += len(whole)
    if not candidates:
        return []
    tree = _tree(text)
    if tree is None:
        return []
    if _tree(apply(text, candidates)) == tree:
        return candidates
    return [edit for edit in candidates if _tree(apply(text, [edit])) == tree]


def _continued(physical: list[str], number: int) -> bool:
    """A line after a backslash continuation (the split would need one too)."""
    return number > 1 and physical[number - 2].rstrip("\r\n").endswith("\\")


def _tree(text: str) -> str | None:
    try:
        return ast.dump(ast.parse(text))
    except SyntaxError:
        return None


def _comment(line: str, limit: int) -> list[str] | None:
    indent = line[: len(line) - len(line.lstrip())]
    body = line.lstrip()[1:].strip()
    if line.lstrip().startswith(PREFIX) or not body:
        return None
    width = max(limit - len(indent) - 2, 20)
    return [f"{indent}# {part}" for part in textwrap.wrap(body, width, break_long_words=False)]


def _code(line: str, limit: int) -> list[str] | None:
    """``line`` split black's way (the condition of a header too long, when it has an ``and``
    or an ``or`` or its head still does not fit, in parentheses, split before them; the value
    of an assignment whose head still does not fit, in parentheses), or None where it cannot
    be read alone."""
    indent = line[: len(line) - len(line.lstrip())]
    code, comment = _split_comment(line.strip())
    if code is None:
        return None
    wrapped = _right_hand(code, indent, limit)
    keyword = code.split(" ", 1)[0]
    test = code[len(keyword) : -1].strip()
    operands = _operands(test) if keyword in ("if", "elif", "while") else []
    if len(wrapped) > 1 and code.endswith(":") and (len(operands) > 1 or len(wrapped[0]) > limit):
        inner = indent + "    "
        wrapped = [
            f"{indent}{keyword} (",
            *[line for part in operands for line in _right_hand(part, inner, limit)],
            f"{indent}):",
        ]
    equals = [t.start[1] for t in _top(code) if t.type == tokenize.OP and t.string == "="]
    if len(wrapped[0]) > limit and equals and not code.endswith(":"):
        target, value = code[: equals[0]].rstrip(), code[equals[0] + 1 :].strip()
        inner = indent + "    "
        parts = _operands(value, ("if", "else"))  # a conditional expression: before if/else
        lines = [line for part in parts for line in _right_hand(part, inner, limit)]
        wrapped = [f"{indent}{target} = (", *lines, f"{indent})"]
    if comment:
        wrapped[0] += f"  {comment}"
    return wrapped


def _operands(test: str, words: tuple[str, ...] = ("and", "or")) -> list[str]:
    """``test`` cut before each top-level ``and``/``or`` (or other ``words``)."""
    cuts = [t.start[1] for t in _top(test) if t.type == tokenize.NAME and t.string in words]
    parts = [test[i:j].strip() for i, j in zip([0, *cuts], [*cuts, len(test)])]
    return [p for p in parts if p]


def _split_comment(code: str) -> tuple[str | None, str]:
    tokens = _tokens(code)
    if not tokens:
        return None, ""
    for token in tokens:
        if token.type == tokenize.COMMENT:
            return code[: token.start[1]].rstrip(), token.string
    return code, ""


def _right_hand(code: str, indent: str, limit: int) -> list[str]:
    """``code`` at ``indent``: as is when it fits, else split at its last bracket pair."""
    if len(indent) + len(code) <= limit:
        return [indent + code]
    pair = _last_pair(code)
    if pair is None:
        return [indent + code]
    opening, closing = pair
    head, body, tail = code[: opening + 1], code[opening + 1 : closing].strip(), code[closing:]
    if not body:
        return [indent + code]
    inner = indent + "    "
    items = _items(body)
    if len(items) == 1 and _takes_comma(head, body):
        middle = _right_hand(body + ",", inner, limit)
    elif len(items) == 1 and len(inner) + len(body) <= limit:
        middle = [inner + body]
    elif len(items) == 1:
        middle = _right_hand(body, inner, limit)
    else:
        middle = [line for item in items for line in _right_hand(item + ",", inner, limit)]
    return [indent + head, *middle, indent + tail]


def _takes_comma(head: str, body: str) -> bool:
    """Whether one item alone on its lines takes black's trailing comma without changing what
    it means: in a call or a dict or set display, unless it is a bare generator."""
    calls = (head.endswith("(") and head[:-1].rstrip()[-1:].isidentifier()) or head.endswith(")(")
    bare_generator = any(t.type == tokenize.NAME and t.string == "for" for t in _top(body))
    return (calls or head.endswith("{")) and not bare_generator


def _top(code: str) -> list[tokenize.TokenInfo]:
    """The tokens of ``code`` outside its brackets."""
    depth, out = 0, []
    for token in _tokens(code):
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
        elif depth == 0:
            out.append(token)
    return out


def _last_pair(code: str) -> tuple[int, int] | None:
    """The offsets of the outermost bracket pair that closes last in ``code``."""
    depth, start, found = 0, 0, None
    for token in _tokens(code):
        if token.type != tokenize.OP:
            continue
        if token.string in _OPEN:
            if depth == 0:
                start = token.start[1]
            depth += 1
        elif token.string in _CLOSE:
            depth -= 1
            if depth == 0:
                found = (start, token.start[1])
    return found


def _items(body: str) -> list[str]:
    """``body`` split at its top-level commas (a trailing one dropped)."""
    commas = [t.start[1] for t in _top(body) if t.type == tokenize.OP and t.string == ","]
    parts = [body[i:j].strip(", ") for i, j in zip([0, *commas], [*commas, len(body)])]
    return [p for p in parts if p]


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
