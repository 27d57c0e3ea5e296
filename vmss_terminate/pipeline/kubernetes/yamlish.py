"""Read a kubeconfig file without a YAML library: JSON, or the block-style YAML subset that
`kubectl config`, kubeadm, k3s and RKE2 write.

The agent's lean install has no YAML parser (docs/kubernetes.md, "Footprint"), and a kubeconfig is
small and regular: nested block mappings, block sequences of mappings, and scalars (plain, single-
or double-quoted, `{}` / `[]`). That is what this reads. Anything else YAML can say -- anchors and
aliases, tags, block scalars (`|`, `>`), flow collections with content, several documents -- is
refused with `YamlSubsetError`, whose message says how to get a file this reader takes
(`kubectl config view --flatten -o json`), rather than read wrongly.

Line breaks are YAML 1.1's, as kubectl (go-yaml) and PyYAML read them: besides `\n` (and `\r\n`),
`\r`, U+0085, U+2028 and U+2029 break a line too. Writers put those only inside quoted scalars
(PyYAML writes `'a\u2028  b'` for "a\u2028b"), where they are folded as YAML 1.1 folds them; anywhere
else they would start a new line of structure, so they are refused.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

_Line = Tuple[int, str, int]  # (indent, content without comment, line number)

HINT = "write it as JSON with: kubectl config view --flatten -o json > FILE"
_BLANK = " \t"  # YAML's white space (str.strip() would also take \xa0 and the like, which are text)
_BREAKS = "\r\n\x85\u2028\u2029"  # YAML 1.1's line breaks; of these only U+2028 and U+2029 are kept as text


class YamlSubsetError(ValueError):
    """The text is not JSON or the YAML subset this module reads."""


def loads(text: str) -> Any:
    """The document in `text` (JSON, or block YAML as kubeconfig files are written)."""
    stripped = text.lstrip("\ufeff").strip(_BLANK + "\r\n")
    if stripped.startswith("{"):
        try:
            return json.loads(stripped)
        except ValueError as exc:
            raise YamlSubsetError(f"not valid JSON: {exc}") from None
    lines = _lines(stripped)
    if not lines:
        return None
    value, end = _block(lines, 0, lines[0][0])
    if end != len(lines):
        raise YamlSubsetError(f"line {lines[end][2]}: unexpected indentation")
    return value


def _lines(text: str) -> List[_Line]:
    out: List[_Line] = []
    # lines end at \n; the other YAML 1.1 breaks are read inside quoted scalars (_fold) and refused elsewhere
    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip(_BLANK))]:
            raise YamlSubsetError(f"line {number}: tab in indentation")
        content = _strip_comment(raw.rstrip(_BLANK + "\r"), number).rstrip(_BLANK)
        if not content.strip(_BLANK):
            continue
        if content.strip(_BLANK) == "---":
            if out:
                raise YamlSubsetError(f"line {number}: more than one document")
            continue
        if content.strip(_BLANK) == "...":
            break
        out.append((len(content) - len(content.lstrip(" ")), content.strip(_BLANK), number))
    return out


def _strip_comment(line: str, number: int) -> str:
    """The line without its comment: `#` at the start or after a space, outside quotes. A quote
    opens a quoted scalar only where a node starts (the line's start, after `- ` or after `: `);
    elsewhere it is text of a plain scalar (`it's`, `-'x`). A line break other than \n outside
    quotes (comment included) is refused: YAML reads a new line there."""
    quote: Optional[str] = None
    node_start = True
    i = 0
    while i < len(line):
        ch, after = line[i], line[i + 1:i + 2]
        if quote:
            if ch == quote and line[i:i + 2] == "''":  # '' is a quote inside a single-quoted scalar
                i += 1
            elif ch == quote:
                quote, node_start = None, False
            elif ch == "\\" and quote == '"':  # an escape: \" does not end the scalar
                i += 1
        elif ch == "#" and (i == 0 or line[i - 1] in _BLANK):
            _unbroken(line[i:], number)
            return line[:i]
        elif ch in _BLANK:
            pass
        elif node_start and ch in "'\"":
            quote = ch
        elif ch in "-:" and (not after or after in _BLANK) and (node_start or ch == ":"):
            node_start = True  # `- ` starts an item; `: ` ends a key
        else:
            _unbroken(ch, number)
            node_start = False
        i += 1
    return line


def _unbroken(text: str, number: int) -> str:
    """`text`, which must hold no line break: outside a quoted scalar one would start a new line."""
    for ch in text:
        if ch in _BREAKS:
            raise YamlSubsetError(f"line {number}: a line break (U+{ord(ch):04X}) outside quotes; {HINT}")
    return text


def _is_item(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _block(lines: List[_Line], i: int, indent: int) -> Tuple[Any, int]:
    if _is_item(lines[i][1]):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _sequence(lines: List[_Line], i: int, indent: int) -> Tuple[List[Any], int]:
    items: List[Any] = []
    while i < len(lines) and lines[i][0] == indent and _is_item(lines[i][1]):
        _, content, number = lines[i]
        rest = content[1:].lstrip(" ")
        if not rest:
            if i + 1 < len(lines) and lines[i + 1][0] > indent:
                value, i = _block(lines, i + 1, lines[i + 1][0])
            else:
                value, i = None, i + 1
        elif _is_item(rest) or _split_key(rest, number) is not None:
            # "- key: value" starts a block whose first line is `rest`, indented where `rest` begins
            inner = indent + len(content) - len(rest)
            lines[i] = (inner, rest, number)
            value, i = _block(lines, i, inner)
        else:
            value, i = _scalar(rest, number), i + 1
        items.append(value)
    return items, i


def _mapping(lines: List[_Line], i: int, indent: int) -> Tuple[Dict[str, Any], int]:
    result: Dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not _is_item(lines[i][1]):
        _, content, number = lines[i]
        split = _split_key(content, number)
        if split is None:
            raise YamlSubsetError(f"line {number}: expected 'key: value'")
        key, rest = split
        if key in result:
            raise YamlSubsetError(f"line {number}: key {key!r} given twice")
        i += 1
        if rest:
            result[key] = _scalar(rest, number)
        elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and _is_item(lines[i][1]))):
            result[key], i = _block(lines, i, lines[i][0])
        else:
            result[key] = None
    return result, i


# [ \t], not \s: Python's \s also matches \xa0 and other characters YAML reads as text
_QUOTED_KEY = re.compile(r"^(\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*')[ \t]*:(?:[ \t]+(.*)|)$", re.DOTALL)
_PLAIN_START = re.compile(r"^[^-?:,\[\]{}#&*!|>'\"%@` \t]|^[-?:][^ \t]")


def _split_key(content: str, number: int) -> Optional[Tuple[str, str]]:
    """(key, the rest) of `key: value` / `key:`; a plain key may hold `:` not followed by a space.
    A key is one line (YAML's simple keys are), so no line break, quoted or not."""
    quoted = _QUOTED_KEY.match(content)
    if quoted is not None:
        return str(_scalar(_unbroken(quoted.group(1), number), number)), (quoted.group(2) or "").strip(_BLANK)
    if not _PLAIN_START.match(content):
        return None
    for i, ch in enumerate(content):
        if ch == ":" and (i + 1 == len(content) or content[i + 1] in _BLANK):
            key = _unbroken(content[:i].rstrip(_BLANK), number)
            return (key, content[i + 1:].strip(_BLANK)) if key else None
    return None


_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", "\"": "\"", "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
            "L": "\u2028", "P": "\u2029"}
_HEX = {"x": 2, "u": 4, "U": 8}


def _fold(body: str, i: int, number: int) -> Tuple[str, int]:
    """The white space and line breaks from `body[i]` in a quoted scalar as YAML 1.1 reads them
    (PyYAML's scanner and kubectl's go-yaml agree), and where they end: blanks before a break and
    indentation after it go; a lone break is a space -- U+2028 and U+2029 are kept instead -- and
    each further break is a newline (U+2028/U+2029 themselves)."""
    end = i
    while end < len(body) and body[end] in _BLANK:
        end += 1
    if end == len(body) or body[end] not in _BREAKS:
        return body[i:end], end
    first = body[end]
    more, end = _breaks(body, end + 1, number)
    return (first if first in "\u2028\u2029" else "" if more else " ") + more, end


def _breaks(body: str, i: int, number: int) -> Tuple[str, int]:
    """After a line break in a quoted scalar: the further breaks (indentation skipped) and where they end."""
    out: List[str] = []
    while True:
        if body[i:i + 3] in ("---", "...") and body[i + 3:i + 4] and body[i + 3] in _BLANK + _BREAKS:
            raise YamlSubsetError(f"line {number}: a document marker inside a quoted scalar")
        while i < len(body) and body[i] in _BLANK:
            i += 1
        if i == len(body) or body[i] not in _BREAKS:
            return "".join(out), i
        out.append(body[i] if body[i] in "\u2028\u2029" else "\n")
        i += 1


def _double_quoted(text: str, number: int) -> str:
    """A YAML double-quoted scalar on one line, its escapes (`\\n`, `\\x85`, `\\u2028`, ...) decoded, breaks folded."""
    if len(text) < 2 or not text.endswith('"'):
        raise YamlSubsetError(f"line {number}: unreadable double-quoted string; {HINT}")
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise YamlSubsetError(f"line {number}: unreadable double-quoted string; {HINT}")
        if ch in _BLANK + _BREAKS:
            chunk, i = _fold(body, i, number)
            out.append(chunk)
            continue
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        code = body[i + 1:i + 2]
        if code and code in _BREAKS:  # an escaped line break joins the lines
            chunk, i = _breaks(body, i + 2, number)
            out.append(chunk)
        elif code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in _HEX and re.fullmatch(f"[0-9A-Fa-f]{{{_HEX[code]}}}", body[i + 2:i + 2 + _HEX[code]]):
            digits = body[i + 2:i + 2 + _HEX[code]]
            if int(digits, 16) > 0x10FFFF:
                raise YamlSubsetError(f"line {number}: escape beyond Unicode in a double-quoted string")
            out.append(chr(int(digits, 16)))
            i += 2 + _HEX[code]
        else:
            raise YamlSubsetError(f"line {number}: unknown escape in a double-quoted string; {HINT}")
    return "".join(out)


def _scalar(text: str, number: int) -> Any:
    if text[0] in "&*!|>":
        what = {"&": "anchors", "*": "aliases", "!": "tags", "|": "block scalars", ">": "block scalars"}[text[0]]
        raise YamlSubsetError(f"line {number}: YAML {what} are not read here; {HINT}")
    if text.startswith('"'):
        return _double_quoted(text, number)
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'") or "'" in text[1:-1].replace("''", ""):
            raise YamlSubsetError(f"line {number}: unreadable single-quoted string")
        return _single_quoted(text[1:-1], number)
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[0] in "[{":
        raise YamlSubsetError(f"line {number}: flow collections are not read here; {HINT}")
    if text in ("null", "Null", "NULL", "~"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", text):  # decimal only: "09" is text, as in YAML
        return int(text)
    return _unbroken(text, number)


def _single_quoted(body: str, number: int) -> str:
    """The text of a single-quoted scalar whose quotes are `''` pairs: `''` is `'`, breaks fold."""
    out, i = [], 0
    while i < len(body):
        if body[i] in _BLANK + _BREAKS:
            chunk, i = _fold(body, i, number)
            out.append(chunk)
        else:
            out.append(body[i])
            i += 2 if body[i] == "'" else 1
    return "".join(out)
