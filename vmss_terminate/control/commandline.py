"""The command lines the product prints for the user to run: one renderer, so every hint runs as
printed and reaches the scale set it is about.

Why: a hint such as "re-run `vmss-terminate upgrade -g rg -n web`" left out the subscription (and
a non-default endpoint): pasted, it exited 2 ("no subscription") or, with AZURE_SUBSCRIPTION_ID
naming another subscription, reached a same-named set there. `target_args` names everything that
picks the set (`--subscription` always, as an id once known; `--cloud`, `--arm-endpoint`,
`--arm-scope` and `--api-version` when not the default), and `command` quotes every word with
`shlex`, so a value with a space or a quote survives a POSIX shell. No Azure SDK import.
"""

from __future__ import annotations

import shlex
from typing import List, Sequence

from vmss_terminate.control.connection import CLOUDS, DEFAULT_CLOUD, NAME_PLACEHOLDER, ResolvedConnection

PROGRAM = "vmss-terminate"


def command(*words: str) -> str:
    """`vmss-terminate WORDS...`, each word quoted for a POSIX shell (only where it needs it)."""
    return " ".join([PROGRAM, *(shlex.quote(str(word)) for word in words)])


def connection_args(resolved: ResolvedConnection) -> List[str]:
    """The options that reach the same subscription and endpoint as `resolved`, whatever the
    environment of the shell the command is pasted into."""
    cloud = resolved.source.cloud or DEFAULT_CLOUD
    base_url, audience, _ = CLOUDS.get(cloud, CLOUDS[DEFAULT_CLOUD])
    subscription = resolved.subscription_id
    if subscription == NAME_PLACEHOLDER and resolved.subscription_name:
        subscription = resolved.subscription_name  # not looked up yet: the name the user gave
    args = ["--subscription", subscription] if subscription else []
    if cloud != DEFAULT_CLOUD:
        args += ["--cloud", cloud]
    if resolved.base_url.rstrip("/") != base_url.rstrip("/"):
        args += ["--arm-endpoint", resolved.base_url]
    if resolved.scope != audience.rstrip("/") + "/.default":
        args += ["--arm-scope", resolved.scope]
    if resolved.api_version:
        args += ["--api-version", resolved.api_version]
    return args


def target_args(resolved: ResolvedConnection, resource_group: str, name: str) -> List[str]:
    """`-g RG -n NAME` and the connection options: the words that reach this one scale set."""
    return ["-g", resource_group, "-n", name, *connection_args(resolved)]


def scale_set_command(verb: str, resolved: ResolvedConnection, resource_group: str, name: str,
                      extra: Sequence[str] = ()) -> str:
    """`vmss-terminate VERB -g RG -n NAME --subscription ID ... EXTRA`, ready to paste."""
    return command(verb, *target_args(resolved, resource_group, name), *extra)
