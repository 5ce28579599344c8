"""MNIST-shaped data with no download.

The Gaudi examples train on MNIST through ``torchvision.datasets.MNIST(..., download=True)``. The lab
cannot use that: torchvision does not import beside the torch build the lab pins, and machines running
the lab (CI included) may have no route to the MNIST mirrors. What the examples need from MNIST is its
*shape* -- batches of ``(B, 1, 28, 28)`` float32 images normalised with MNIST's mean and std, and int64
labels 0..9 -- so that the graphs, recipes, recompilations and timings look like the real thing.

Three ways in:

- ``MNISTLike``: scikit-learn's bundled handwritten digits (1797 8x8 images, shipped inside the
  sklearn wheel), turned into MNIST-shaped samples. Always available, deterministic.
- ``MNIST``: reads real MNIST IDX files if you have them, in torchvision's layout
  ``root/MNIST/raw/train-images-idx3-ubyte[.gz]``; never downloads.
- ``load_mnist``: real MNIST if its files are there, else ``MNISTLike``; says which.

Both datasets return ``(image, label)`` with ``image`` a ``(1, 28, 28)`` float32 tensor, exactly what
``torchvision.datasets.MNIST`` gives with ``transforms.ToTensor()`` then
``transforms.Normalize((0.1307,), (0.3081,))``. This module imports only torch (and numpy) at import
time: scikit-learn is imported when an ``MNISTLike`` is first built.
"""
from __future__ import annotations

import functools
import gzip
import logging
import os
from typing import Callable, Optional

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["MNIST", "MNISTLike", "load_mnist", "read_idx", "MNIST_MEAN", "MNIST_STD"]

log = logging.getLogger(__name__)

# MNIST's training-set pixel mean and std, the constants every MNIST example normalises with.
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

CLASSES = [
    "0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
    "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine",
]

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),  # unsigned byte: MNIST images and labels
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def normalize(x: torch.Tensor) -> torch.Tensor:
    """``transforms.Normalize((0.1307,), (0.3081,))`` on a [0, 1] image, with the same float ops."""
    return x.sub(MNIST_MEAN).div(MNIST_STD)


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Read an IDX file (the format MNIST is distributed in), plain or gzip-compressed.

    Layout: two zero bytes, a type code (0x08 = unsigned byte, ...), the number of dimensions ``n``,
    then ``n`` big-endian uint32 sizes, then the values, big-endian, row-major. Compression is
    detected from the gzip magic bytes, not the file name. Returns a tensor of the file's shape in
    native byte order (uint8 for MNIST).
    """
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (magic number must start with two zero bytes)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02X}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({ndim} dimensions announced)")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: IDX dims {dims} need {expected} bytes of data, file has {len(raw) - header}"
        )
    values = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    # .astype makes a native-endian, writable copy that torch can own.
    return torch.from_numpy(values.astype(dtype.newbyteorder("="), copy=True))


class _MNISTShaped(Dataset):
    """Shared by MNIST and MNISTLike: uint8 ``data`` (N, 28, 28) and int64 ``targets`` (N,).

    ``__getitem__`` does what torchvision's MNIST with ToTensor + Normalize does: scale to [0, 1],
    add the channel dim, normalise with MNIST's mean/std. A ``transform`` given here receives the
    [0, 1] ``(1, 28, 28)`` tensor *instead of* that normalisation (there are no PIL images here).
    """

    classes = CLASSES
    data: torch.Tensor
    targets: torch.Tensor

    def __init__(self, transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None):
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        img = self.data[index].unsqueeze(0).float().div(255)  # (1, 28, 28) in [0, 1]
        img = normalize(img) if self.transform is None else self.transform(img)
        target = int(self.targets[index])
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


@functools.lru_cache(maxsize=1)
def _digits_as_mnist() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 sklearn digits as MNIST-style uint8 (N, 28, 28) images, and int64 labels.

    MNIST digits are size-normalised into a 20x20 box centred in a 28x28 frame, so the same is done
    here: 8x8 (values 0..16) -> [0, 1] -> bilinear resize to 20x20 -> 4-pixel black border -> 28x28,
    quantised to uint8 like MNIST's pixels. With that border the normalised pixels come out with
    mean ~0.08 and std ~0.90, close to what MNIST's own constants give on MNIST.
    """
    from sklearn.datasets import load_digits  # lazy: keeps `import hpu_lab.lab.data` light

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    x = torch.nn.functional.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False)
    x = torch.nn.functional.pad(x, (4, 4, 4, 4))  # (N, 1, 28, 28)
    data = (x * 255).round().clamp(0, 255).to(torch.uint8).squeeze(1)
    targets = torch.tensor(digits.target, dtype=torch.int64)
    return data, targets


class MNISTLike(_MNISTShaped):
    """MNIST-shaped samples from scikit-learn's bundled digits: no download, always the same.

    ``train=True`` is the first ``TRAIN_SIZE`` (1600) digits in sklearn's fixed order,
    ``train=False`` the remaining 197. 1600 is a multiple of 200, the seeds' batch size, so as with
    real MNIST's 60000 every training batch has the same shape; shape changes in the lab happen only
    where a notebook makes them on purpose.

    The signature follows ``torchvision.datasets.MNIST``; ``root`` and ``download`` are accepted and
    ignored, so code written for MNIST runs by changing the class name.
    """

    TRAIN_SIZE = 1600

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None, download: bool = False):
        super().__init__(transform, target_transform)
        self.root = root
        self.train = train
        data, targets = _digits_as_mnist()
        split = slice(0, self.TRAIN_SIZE) if train else slice(self.TRAIN_SIZE, None)
        self.data, self.targets = data[split], targets[split]

    def __repr__(self) -> str:
        split = "Train" if self.train else "Test"
        return f"MNISTLike(split={split}, n={len(self)}, from sklearn digits)"


def _mnist_files(root: str | os.PathLike, train: bool) -> tuple[str, str]:
    prefix = "train" if train else "t10k"
    return (os.path.join(root, "MNIST", "raw", f"{prefix}-images-idx3-ubyte"),
            os.path.join(root, "MNIST", "raw", f"{prefix}-labels-idx1-ubyte"))


def _find(path: str) -> Optional[str]:
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate):
            return candidate
    return None


class MNIST(_MNISTShaped):
    """Real MNIST from IDX files already on disk, in torchvision's layout; never downloads.

    Looks for ``root/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``, each plain or
    ``.gz``. Missing files raise ``FileNotFoundError`` saying where it looked: use
    ``hpu_lab.lab.data.MNISTLike`` (or ``load_mnist``) when you have no MNIST files.
    ``download=True`` is accepted for compatibility with the examples, but nothing is fetched.
    """

    def __init__(self, root: str | os.PathLike, train: bool = True,
                 transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None, download: bool = False):
        super().__init__(transform, target_transform)
        self.root = root
        self.train = train
        wanted = _mnist_files(root, train)
        found = [_find(p) for p in wanted]
        if None in found:
            missing = [p for p, f in zip(wanted, found) if f is None]
            raise FileNotFoundError(
                "MNIST files not found: looked for "
                + ", ".join(f"{p} (or {os.path.basename(p)}.gz)" for p in missing)
                + ". hpu_lab never downloads"
                + (" (download=True is ignored)" if download else "")
                + ": put the IDX files there, or use hpu_lab.lab.data.MNISTLike (MNIST-shaped digits "
                "bundled with scikit-learn), or hpu_lab.lab.data.load_mnist(), which picks for you."
            )
        self.data = read_idx(found[0])
        self.targets = read_idx(found[1]).to(torch.int64)
        if self.data.dim() != 3 or self.data.dtype != torch.uint8:
            raise ValueError(f"{found[0]}: expected uint8 images (N, H, W), got "
                             f"{self.data.dtype} {tuple(self.data.shape)}")
        if self.targets.shape != (self.data.shape[0],):
            raise ValueError(f"{found[1]}: {tuple(self.targets.shape)} labels for "
                             f"{self.data.shape[0]} images in {found[0]}")

    def __repr__(self) -> str:
        split = "Train" if self.train else "Test"
        return f"MNIST(split={split}, n={len(self)}, root={self.root!r})"


def load_mnist(root: str | os.PathLike = "./data", train: bool = True,
               transform: Optional[Callable] = None, verbose: bool = True) -> Dataset:
    """Real MNIST if its files are under ``root`` (torchvision's layout), else ``MNISTLike``.

    Says which one it chose (printed when ``verbose``, always logged), because training curves
    and accuracies differ between the two.
    """
    try:
        ds: Dataset = MNIST(root, train=train, transform=transform)
        msg = f"hpu_lab.lab.data: using MNIST from {os.path.join(root, 'MNIST', 'raw')} ({len(ds)} images)"
    except FileNotFoundError:
        ds = MNISTLike(root, train=train, transform=transform)
        msg = (f"hpu_lab.lab.data: no MNIST files under {os.path.join(root, 'MNIST', 'raw')}; "
               f"using MNISTLike ({len(ds)} images from scikit-learn's digits)")
    log.info(msg)
    if verbose:
        print(msg)
    return ds
