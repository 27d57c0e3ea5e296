"""Azure's naming rules for the names the control plane sends, checked before any request.

Why: a name ARM can never accept (empty, `a/b`, a space) used to travel to ARM and come back as a
misleading "scale set /x not found" (exit 1). Refusing it locally is exit 2 and says which rule.

* Resource group: 1..90 characters: letters or digits (Unicode), `_`, `-`, `.`, `(`, `)`; not ending
  with `.` (learn.microsoft.com, "Naming rules and restrictions for Azure resources").
* Scale set: 1..64 characters: ASCII letters, digits, `_`, `.`, `-`; starting with a letter or digit
  and not ending with `.` or `-` (Windows further limits the computer-name prefix, not the name).
"""

from __future__ import annotations

import re

from vmss_terminate.errors import InvalidValue

_RESOURCE_GROUP = re.compile(r"^[\w().-]{1,90}$")
_SCALE_SET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_resource_group(name: str, *, param: str = "resource_group") -> str:
    """Return `name` if Azure could accept it as a resource group name, else raise InvalidValue."""
    text = name if isinstance(name, str) else str(name)
    if not text:
        raise InvalidValue(param, text, "a resource group name cannot be empty")
    if not _RESOURCE_GROUP.match(text) or text.endswith("."):
        raise InvalidValue(param, text, "resource group names are 1-90 letters, digits, '_', '-', '.', '(' or "
                                        "')' and do not end with '.'")
    return text


def check_scale_set_name(name: str, *, param: str = "name") -> str:
    """Return `name` if Azure could accept it as a scale set name, else raise InvalidValue."""
    text = name if isinstance(name, str) else str(name)
    if not text:
        raise InvalidValue(param, text, "a scale set name cannot be empty")
    if not _SCALE_SET.match(text) or text[-1] in ".-":
        raise InvalidValue(param, text, "scale set names are 1-64 ASCII letters, digits, '_', '.' or '-', start "
                                        "with a letter or digit and do not end with '.' or '-'")
    return text
