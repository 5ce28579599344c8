"""torch.save / torch.load of hpu tensors keep storages, views and sharing as CPU does, with every
form of ``map_location`` (hpu_lab/integration/serialization.py). Before, a view saved with its base came back as
an independent tensor, and ``map_location="hpu"`` raised (``torch.hpu.device`` was missing)."""
import io
import pickle

import pytest
import torch

import hpu_lab.core as htcore

MAP_LOCATIONS = {
    "default": None,
    "hpu": "hpu",
    "hpu:0": "hpu:0",
    "device": torch.device("hpu"),
    "dict": {"hpu:0": "hpu:0", "cpu": "hpu:0"},
    "callable-hpu()": lambda storage, loc: storage.hpu(),
    "callable-to": lambda storage, loc: storage.to(device="hpu"),
}


def _roundtrip(obj, **load):
    buf = io.BytesIO()
    torch.save(obj, buf, **{k: v for k, v in load.items() if k == "_use_new_zipfile_serialization"})
    buf.seek(0)
    return torch.load(buf, **{k: v for k, v in load.items() if k != "_use_new_zipfile_serialization"})


def _views(dev):
    base = torch.arange(12.).reshape(3, 4).to(dev)
    return {"base": base, "row": base[1], "col": base[:, 2], "t": base.t(), "other": torch.ones(2).to(dev)}


def _layout(t):
    return (t.device.type, t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.untyped_storage().nbytes())


@pytest.mark.parametrize("saved_on", ["hpu", "cpu"])
@pytest.mark.parametrize("where", list(MAP_LOCATIONS))
@pytest.mark.parametrize("weights_only", [True, False])
def test_views_come_back_as_views_of_one_storage(saved_on, where, weights_only):
    if saved_on == "cpu" and where == "default":
        pytest.skip("a CPU file loads on the CPU by default")
    got = _roundtrip(_views(saved_on), map_location=MAP_LOCATIONS[where], weights_only=weights_only)
    want = _roundtrip(_views("cpu"), weights_only=weights_only)
    for k in want:
        assert _layout(got[k]) == ("hpu",) + _layout(want[k])[1:], k
        assert torch.equal(got[k].cpu(), want[k])
    ptrs = {k: got[k].untyped_storage().data_ptr() for k in got}
    assert len({ptrs[k] for k in ("base", "row", "col", "t")}) == 1 and ptrs["other"] != ptrs["base"]
    got["row"].add_(100)                          # a write through one view is seen by the others
    want["row"].add_(100)
    for k in ("base", "col", "t"):
        assert torch.equal(got[k].cpu(), want[k]), k


def test_legacy_format_and_pickle_keep_the_device_and_the_sharing():
    got = _roundtrip(_views("hpu"), _use_new_zipfile_serialization=False, weights_only=False)
    assert got["row"].device.type == "hpu"
    got["row"].zero_()
    assert torch.equal(got["base"][1].cpu(), torch.zeros(4))
    t = pickle.loads(pickle.dumps(torch.arange(3.).to("hpu")))
    assert t.device.type == "hpu" and torch.equal(t.cpu(), torch.arange(3.))


def test_a_gaudi_file_names_hpu_and_loads_on_cpu():
    """The file says location "hpu:0" (as a checkpoint saved on Gaudi does); map_location="cpu"
    loads it on the CPU, sharing kept."""
    seen = []
    buf = io.BytesIO()
    torch.save(_views("hpu"), buf)
    buf.seek(0)
    torch.load(buf, map_location=lambda storage, loc: seen.append(loc))
    assert seen == ["hpu:0", "hpu:0"]
    buf.seek(0)
    got = torch.load(buf, map_location="cpu")
    assert got["row"].device.type == "cpu"
    got["row"].zero_()
    assert torch.equal(got["base"][1], torch.zeros(4))


def test_tied_weights_and_optimizer_state_round_trip():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)).to("hpu")
    model[1].weight = model[0].weight                    # tied
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.tensor([1, 2, 3]).to("hpu")).sum().backward()
    opt.step()
    htcore.mark_step()
    ckpt = _roundtrip({"model": model.state_dict(), "opt": opt.state_dict()})
    sd = ckpt["model"]
    assert sd["0.weight"].untyped_storage().data_ptr() == sd["1.weight"].untyped_storage().data_ptr()
    for k, v in model.state_dict().items():
        assert torch.equal(sd[k].cpu(), v.cpu()), k
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(ckpt["opt"]["state"][0][k].cpu(), v.cpu()), k
    model2 = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)).to("hpu")
    model2.load_state_dict(sd)
    assert torch.equal(model2[1].weight.cpu(), model[0].weight.cpu())


def test_parameters_pending_values_and_dtypes():
    p = torch.nn.Parameter(torch.randn(3).to("hpu"))
    pending = torch.arange(6.).to("hpu") * 2             # lazy: not computed yet when saved
    vals = {"p": p, "pending": pending, "bf16": torch.randn(4).bfloat16().to("hpu"),
            "long": torch.arange(5).to("hpu"), "bool": (torch.arange(4) > 1).to("hpu"),
            "u16": torch.arange(4).to(torch.uint16).to("hpu")}    # a "v3" dtype: saved alone
    got = _roundtrip(vals)
    assert isinstance(got["p"], torch.nn.Parameter) and got["p"].requires_grad
    for k, v in vals.items():
        assert got[k].device.type == "hpu" and got[k].dtype == v.dtype and torch.equal(got[k].cpu(), v.cpu()), k


def test_a_later_save_writes_the_new_values():
    t = torch.zeros(3).to("hpu")
    first = _roundtrip(t)
    t.add_(1)
    second = _roundtrip(t)
    assert torch.equal(first.cpu(), torch.zeros(3)) and torch.equal(second.cpu(), torch.ones(3))


def test_storages_on_hpu():
    """``torch.UntypedStorage(n, device="hpu")``, ``storage.hpu()``, ``storage.to(device="hpu")``: a storage on
    hpu (before, the first of them crashed the process: no allocator)."""
    s = torch.UntypedStorage(8, device="hpu")
    assert s.device.type == "hpu" and s.nbytes() == 8
    cpu = torch.arange(4, dtype=torch.int16).untyped_storage()
    for moved in (cpu.hpu(), cpu.to(device="hpu")):
        assert moved.device.type == "hpu"
        t = torch.empty(0, dtype=torch.int16, device="hpu").set_(moved)
        assert torch.equal(t.cpu(), torch.arange(4, dtype=torch.int16))
    with pytest.raises(RuntimeError, match="hpu:1"):
        torch.UntypedStorage(8, device="hpu:1")


def test_a_missing_device_is_refused_as_torch_refuses_it():
    buf = io.BytesIO()
    torch.save(torch.ones(2), buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on HPU device 1 but "
                                           r"torch.hpu.device_count\(\) is 1"):
        torch.load(buf, map_location="hpu:1")
