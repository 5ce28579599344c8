"""``habana_dataloader.habana_dataset``: ``ImageFolderWithManifest``.

The real class is an ImageNet folder listed by a manifest file (``MANIFEST_DIR``) instead of a
directory walk, read by the media-pipe loader. Here it is torchvision's ``ImageFolder`` (the same
samples, found by walking the folder): with no media engine, ``HabanaDataLoader`` feeds it to torch's
DataLoader. It needs torchvision, as the real one does.
"""
from __future__ import annotations

try:
    from torchvision.datasets import ImageFolder as _Base
except ImportError:                      # no torchvision: the class exists, building one says why
    class _Base:
        def __init__(self, *args, **kwargs):
            raise ImportError("habana_dataset.ImageFolderWithManifest needs torchvision (pip install torchvision)")


class ImageFolderWithManifest(_Base):
    pass
