"""`agent run --kubernetes`: drain the Kubernetes node this VM is before approving its Terminate.

Plain REST with `requests` (no Kubernetes client library: the agent's lean install stays lean):
- `credentials.py`: in-cluster service account or `--kubeconfig FILE` (`yamlish.py` reads it);
- `api.py`: `KubeApi`, the one HTTP helper for the API server;
- `rules.py`: the pure decisions (which node, which pods, patches, Events);
- `drain.py`: `NodeDrain`, the step the job runner runs after the hooks, and its undo.

Importing `vmss_terminate.pipeline.kubernetes` loads only `rules` (cheap, no I/O); the agent imports
the rest when --kubernetes is given.
"""

from vmss_terminate.pipeline.kubernetes.rules import DEFAULT_TAINT, parse_taint

__all__ = ["DEFAULT_TAINT", "parse_taint"]
