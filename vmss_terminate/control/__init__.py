"""Control plane: enable, disable, retime, status and upgrade of scale sets through ARM.

Azure SDK modules are imported lazily inside the functions that talk to ARM, so that
`vmss_terminate.control.body` (used by `render`) stays cheap to import.
"""
