"""hpu_lab.lab.data: MNIST-shaped data with no download, and a reader for real MNIST IDX files."""
import gzip
import struct

import pytest
import torch

from hpu_lab.lab import data as hd


def write_idx(path, array: torch.Tensor, compress: bool = False):
    """Write a uint8 tensor as an IDX file: 0, 0, type 0x08, ndim, big-endian dims, bytes."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim())
    header += struct.pack(">" + "I" * array.dim(), *array.shape)
    raw = header + array.contiguous().numpy().tobytes()
    if compress:
        raw = gzip.compress(raw)
    path.write_bytes(raw)


def make_mnist_dir(root, train=True, n=5, compress=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), dtype=torch.uint8, generator=g)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    prefix = "train" if train else "t10k"
    ext = ".gz" if compress else ""
    write_idx(raw / f"{prefix}-images-idx3-ubyte{ext}", images, compress)
    write_idx(raw / f"{prefix}-labels-idx1-ubyte{ext}", labels, compress)
    return images, labels


# --- MNISTLike --------------------------------------------------------------------------------

def test_mnistlike_shapes_dtypes_labels():
    train, test = hd.MNISTLike(train=True), hd.MNISTLike(train=False)
    assert len(train) == 1600 and len(test) == 197  # all 1797 sklearn digits, disjoint split
    img, label = train[0]
    assert img.shape == (1, 28, 28) and img.dtype == torch.float32
    assert type(label) is int
    assert train.targets.dtype == torch.int64
    assert set(train.targets.tolist()) == set(range(10))
    assert 0 <= int(test.targets.min()) and int(test.targets.max()) <= 9


def test_mnistlike_is_deterministic():
    a, b = hd.MNISTLike(train=True), hd.MNISTLike(train=True)
    assert torch.equal(a.data, b.data) and torch.equal(a.targets, b.targets)
    assert torch.equal(a[7][0], b[7][0])
    # sklearn's digits come in a fixed order starting 0, 1, 2, ...
    assert a.targets[:10].tolist() == list(range(10))


def test_mnistlike_normalisation():
    ds = hd.MNISTLike(train=True)
    x = torch.stack([ds[i][0] for i in range(len(ds))])
    lo, hi = (0 - 0.1307) / 0.3081, (1 - 0.1307) / 0.3081
    assert x.min().item() == pytest.approx(lo, abs=1e-6)  # the black border
    assert x.max().item() <= hi + 1e-6
    # MNIST's constants bring the digits roughly to zero mean, unit std (as on real MNIST).
    assert abs(x.mean().item()) < 0.3
    assert 0.7 < x.std().item() < 1.3
    # Same float ops as torchvision's ToTensor + Normalize on the uint8 pixels.
    expected = (ds.data[3].float().div(255).unsqueeze(0) - 0.1307) / 0.3081
    assert torch.equal(ds[3][0], expected)


def test_mnistlike_custom_transform_replaces_normalisation():
    ds = hd.MNISTLike(train=False, transform=lambda x: x * 2, target_transform=lambda t: t + 100)
    img, label = ds[0]
    assert torch.equal(img, ds.data[0].float().div(255).unsqueeze(0) * 2)
    assert label == int(ds.targets[0]) + 100


def test_dataloader_batches_like_the_seed():
    loader = torch.utils.data.DataLoader(hd.MNISTLike(train=True), batch_size=200)
    shapes = [(x.shape, y.shape, y.dtype) for x, y in loader]
    assert shapes == [((200, 1, 28, 28), (200,), torch.int64)] * 8  # 1600 = 8 x 200: no ragged tail


# --- IDX files and real MNIST -----------------------------------------------------------------

@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_roundtrip(tmp_path, compress):
    images = torch.randint(0, 256, (3, 28, 28), dtype=torch.uint8)
    path = tmp_path / ("x.idx.gz" if compress else "x.idx")
    write_idx(path, images, compress)
    back = hd.read_idx(path)
    assert back.dtype == torch.uint8 and torch.equal(back, images)


def test_read_idx_big_endian_int32(tmp_path):
    values = [1, -2, 70000, 2**31 - 1]
    path = tmp_path / "ints.idx"
    path.write_bytes(struct.pack(">BBBBI", 0, 0, 0x0C, 1, 4) + struct.pack(">4i", *values))
    assert hd.read_idx(path).tolist() == values


def test_read_idx_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="not an IDX file"):
        hd.read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(struct.pack(">BBBBI", 0, 0, 0x08, 1, 10) + b"\x00" * 3)
    with pytest.raises(ValueError, match="need 10 bytes"):
        hd.read_idx(short)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_mnist_reads_torchvision_layout(tmp_path, compress, train):
    images, labels = make_mnist_dir(tmp_path, train=train, compress=compress)
    ds = hd.MNIST(root=tmp_path, train=train)
    assert len(ds) == 5
    assert torch.equal(ds.data, images)
    assert ds.targets.dtype == torch.int64 and torch.equal(ds.targets, labels.long())
    img, label = ds[2]
    assert img.shape == (1, 28, 28) and img.dtype == torch.float32
    assert torch.equal(img, (images[2].float().div(255).unsqueeze(0) - 0.1307) / 0.3081)
    assert label == int(labels[2])


def test_mnist_missing_files_error(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        hd.MNIST(root=tmp_path, train=True, download=True)
    msg = str(info.value)
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in msg
    assert "train-labels-idx1-ubyte" in msg
    assert "hpu_lab.lab.data.MNISTLike" in msg


def test_load_mnist_picks_real_files_else_mnistlike(tmp_path, capsys):
    ds = hd.load_mnist(root=tmp_path, train=True)
    assert isinstance(ds, hd.MNISTLike)
    assert "using MNISTLike" in capsys.readouterr().out
    make_mnist_dir(tmp_path, train=True)
    ds = hd.load_mnist(root=tmp_path, train=True)
    assert isinstance(ds, hd.MNIST) and len(ds) == 5
    assert "using MNIST from" in capsys.readouterr().out


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, hpu_lab.lab.data; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
