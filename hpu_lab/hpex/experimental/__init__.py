"""``habana_frameworks.torch.hpex.experimental``: Intel's Transformer Engine (``transformer_engine``)."""
