"""vmss-terminate: graceful scale-in for Azure VM Scale Sets.

The package root imports nothing heavy: the in-VM agent must start without the Azure SDK.
"""

__version__ = "0.1.0"
