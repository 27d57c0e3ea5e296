"""Exception types that carry the exit code the CLI must use.

Exit codes are a contract: 0 done (including "no change"), 1 Azure or runtime failure, 2 bad input,
130 stopped by Ctrl-C (SIGINT), 143 stopped by SIGTERM. Library code raises these; the CLI root turns
them into one line on stderr (and a JSON object with `-o json`) and the exit code.

A message speaks the caller's language: the library's text names Python parameters
(`subscription_id=`); where the CLI spells the same thing as an option (`--subscription`), the error
also carries `cli_message`, which the CLI prints instead.
"""

from __future__ import annotations

import signal
from typing import Any, Dict, Optional


class VmssTerminateError(Exception):
    """Base error; a runtime failure unless a subclass says otherwise."""

    exit_code = 1
    kind = "runtime"

    def __init__(self, message: str, *, cli_message: Optional[str] = None) -> None:
        super().__init__(message)
        self.cli_message = cli_message

    def details(self) -> Dict[str, Any]:
        """Extra machine-readable fields for the `-o json` error object."""
        return {}


class UsageError(VmssTerminateError):
    """Bad input from the user: exit code 2, raised before anything is sent."""

    exit_code = 2
    kind = "usage"


class AzureError(VmssTerminateError):
    """Azure (or the emulator standing in for it) refused or failed: exit code 1."""

    exit_code = 1
    kind = "azure"


class StopSignal(KeyboardInterrupt):
    """SIGTERM raised as an interrupt (the CLI installs the handler), so that work in progress is
    reported the same way for Ctrl-C and for SIGTERM; `signum` tells them apart."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def interrupt_exit_code(exc: Optional[BaseException]) -> int:
    """128 + the signal number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def interrupt_name(exc: Optional[BaseException]) -> str:
    return "SIGTERM" if getattr(exc, "signum", signal.SIGINT) == signal.SIGTERM else "Ctrl-C"


class InvalidValue(UsageError):
    """One input value refused, said in the caller's language: the library's message names the
    Python parameter (`invalid batch_size '-1': ...`), the CLI's the option (`invalid --batch-size
    '-1': ...`); `option` defaults to the parameter spelled as an option."""

    def __init__(self, param: str, value: Any, reason: str, *, option: Optional[str] = None) -> None:
        self.param, self.value, self.reason = param, value, reason
        self.option = option or "--" + param.replace("_", "-")
        super().__init__(f"invalid {param} {self.shown}: {reason}",
                         cli_message=f"invalid {self.option} {self.shown}: {reason}")

    @property
    def shown(self) -> str:
        """The value as the user wrote it: quoted text (cut after 40 characters: a 5,000-digit
        number is not repeated), `120` for 120.0."""
        if isinstance(self.value, str):
            return repr(self.value) if len(self.value) <= 40 else f"{self.value[:40]!r}... ({len(self.value)} characters)"
        return f"{self.value:g}" if isinstance(self.value, float) else str(self.value)


class Interrupted(VmssTerminateError):
    """A stop signal ended work part-way; the message says what was done and how to resume.
    Exit 130 (Ctrl-C) or 143 (SIGTERM)."""

    kind = "interrupted"

    def __init__(self, message: str, signal_exc: Optional[BaseException] = None) -> None:
        super().__init__(message)
        self.exit_code = interrupt_exit_code(signal_exc)
