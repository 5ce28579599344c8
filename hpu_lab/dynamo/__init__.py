"""``habana_frameworks.torch.dynamo``: the torch.compile side of the bridge.

hpu_lab's compile backend itself is ``hpu_lab.integration.compile_backend`` (registered as ``"hpu_backend"`` when
``import hpu_lab`` runs); this package holds the module names Gaudi code imports around it.
"""
