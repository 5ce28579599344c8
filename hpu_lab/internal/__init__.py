"""``habana_frameworks.torch.internal``: the bridge's internal helpers that tests and tools import."""
