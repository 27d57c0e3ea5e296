"""A cheap fingerprint of this installation's sources: the name and size of every `.py` file of
`vmss_terminate` and `vmss_terminate_sim` (the generated `commands/helptexts.py` aside).

Why: `entry.py` prints `--help` from text kept in `commands/helptexts.py`; text kept from other
sources than the ones installed (an option added, a docstring changed, and the text not
regenerated) must never be printed. The kept text carries the fingerprint it was rendered from;
when the installed sources' differ, click renders the help instead. Names and sizes (os.stat, no
reading: ~1 ms for ~250 files), not times: an install or a checkout sets new times, same sizes.
"""

from __future__ import annotations

import os
import zlib

GENERATED = "helptexts.py"


def source_fingerprint() -> int:
    package = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(package)
    entries = []
    for root in (package, os.path.join(top, "vmss_terminate_sim")):
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py") and name != GENERATED:
                    path = os.path.join(folder, name)
                    entries.append(f"{os.path.relpath(path, top)}:{os.path.getsize(path)}")
    return zlib.crc32("\n".join(entries).encode("utf-8"))
