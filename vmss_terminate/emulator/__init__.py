"""Local emulators of Azure endpoints (IMDS, ARM), built on the stdlib so users can test hooks
and pipelines without a subscription. See `server.py` for the shared HTTP machinery."""
