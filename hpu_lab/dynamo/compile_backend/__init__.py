"""``habana_frameworks.torch.dynamo.compile_backend``: importing it registers ``backend="hpu_backend"``
(in hpu_lab, ``import hpu_lab`` already did), and gives ``config``, ``passes`` and ``shared_layer``."""
from ...integration import compile_backend as _backend  # noqa: F401  (registration happens on import hpu_lab)
from . import config  # noqa: F401
