"""Snippets for a user's own infrastructure code (ARM, Bicep, Terraform, REST, az CLI).

Every format is derived from `vmss_terminate.control.body`, the profile the control plane PATCHes,
so a pasted snippet and `vmss-terminate enable` can never disagree.
"""

from __future__ import annotations

from vmss_terminate.iac.render import FORMATS, RenderOptions, render

__all__ = ["FORMATS", "RenderOptions", "render"]
