"""Helpers the tests import (``from helpers import counts``); conftest.py keeps the fixtures only."""
from hpu_lab import metrics


def counts(name):
    """The stats of the global metric ``name`` as a dict: ``counts("graph_compilation")["TotalNumber"]``."""
    return dict(metrics.metric_global(name).stats())
