"""Exception types that carry the exit code the CLI must use.

Exit codes are a contract: 0 done (including "no change"), 1 Azure or runtime failure, 2 bad input.
Library code raises these; the CLI root turns them into one line on stderr and the exit code.
"""

from __future__ import annotations


class VmssTerminateError(Exception):
    """Base error; a runtime failure unless a subclass says otherwise."""

    exit_code = 1


class UsageError(VmssTerminateError):
    """Bad input from the user: exit code 2, raised before anything is sent."""

    exit_code = 2


class AzureError(VmssTerminateError):
    """Azure (or the emulator standing in for it) refused or failed: exit code 1."""

    exit_code = 1
