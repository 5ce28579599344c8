"""Observers of the event stream: metrics (``habana_frameworks.torch.hpu.metrics``), the Chrome-trace
export and torch.profiler's view of the emulated HPU.
"""
