"""``habana_frameworks.torch.utils.library_loader``: old scripts call ``load_habana_module()``; in
hpu_lab the device is registered by ``import hpu_lab``, so there is nothing left to load."""


def load_habana_module() -> None:
    import hpu_lab  # noqa: F401


def is_habana_avaialble() -> bool:     # (sic) the bridge's spelling
    return True


is_habana_available = is_habana_avaialble
