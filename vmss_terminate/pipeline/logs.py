"""Agent logging for the CLI: human-readable lines by default, one JSON object per line with
`--log-format json` (decisions carry their structured fields)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Dict

from vmss_terminate.errors import UsageError

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: Dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        decision = getattr(record, "decision", None)
        if decision is not None:
            out.update({k: v for k, v in decision.to_json().items() if k not in ("message", "at")})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    converter = time.gmtime  # type: ignore[assignment]  # typeshed: gmtime(secs=None) vs converter(secs)

    def __init__(self) -> None:
        super().__init__("%(asctime)sZ %(levelname)-7s %(message)s", "%Y-%m-%dT%H:%M:%S")


def configure(log_format: str = "text", level: int = logging.INFO) -> None:
    """Send agent logs to stderr in `log_format` (text|json)."""
    if log_format not in FORMATS:
        raise UsageError(f"invalid --log-format {log_format!r}: use text or json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger("vmss_terminate")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
