"""The event -> acknowledge histogram keeps fixed buckets (Prometheus _bucket/_sum/_count): its
memory does not grow with the number of acknowledgements (review: it kept one float per event)."""

from __future__ import annotations

from vmss_terminate.central.metrics import CentralMetrics

HIST = "vmss_terminate_central_event_to_acknowledge_seconds"


def _size(metrics: CentralMetrics) -> int:
    return len(repr({k: v for k, v in vars(metrics).items() if k not in ("_lock", "sections")}))


def test_acknowledge_seconds_are_fixed_buckets_whose_memory_does_not_grow() -> None:
    metrics = CentralMetrics()
    for seconds in (0.5, 3.0, 3.0, 700.0, 5000.0):
        metrics.observe("acknowledged", event_type="Terminate", event_id="e", seconds=seconds)
    before = _size(metrics)
    text = metrics.text()
    assert f'{HIST}_bucket{{le="1"}} 1' in text and f'{HIST}_bucket{{le="5"}} 3' in text
    assert f'{HIST}_bucket{{le="900"}} 4' in text and f'{HIST}_bucket{{le="+Inf"}} 5' in text
    assert f"{HIST}_sum 5706.5" in text and f"{HIST}_count 5" in text
    for _ in range(10_000):
        metrics.observe("acknowledged", event_type="Terminate", event_id="e", seconds=2.0)
    assert _size(metrics) - before < 100  # a few more digits, not 10,000 entries
    assert f'{HIST}_bucket{{le="+Inf"}} 10005' in metrics.text()
