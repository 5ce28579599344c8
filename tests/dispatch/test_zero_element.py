"""Zero-element tensors through every loss of torch.nn.functional and the reductions, forward and
backward, as CPU (issue 32 item 5).

``mse_loss`` backward on zero elements raised ZeroDivisionError on hpu where CPU gives nan and an
empty gradient: the output shapes of a lazy op come from its Meta kernel, and for
``mse_loss_backward`` (``smooth_l1``, ``huber``) that is a Python decomposition computing
``2 / numel()``, arithmetic CPU's C++ kernel does in floating point (inf, times no elements).
hpu_lab now asks CPU's kernel, on empty stand-ins, when a decomposition fails that way.

Not comparable: ``multi_margin_loss`` (mean, sum) and ``multilabel_margin_loss`` (mean, sum) on zero
elements return an uninitialized value on CPU itself (a different number on each run); the
comparison there is of shapes and dtypes only (docs/correctness.md).
"""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import config

CPU_UNDEFINED = {("multi_margin_loss", "mean"), ("multi_margin_loss", "sum"), ("multilabel_margin_loss", "mean"),
                 ("multilabel_margin_loss", "sum")}


def _f(shape, g):
    return torch.randn(shape, generator=g)


def _loss_cases():
    """name -> (function, inputs maker): inputs are CPU tensors; float ones get gradients."""
    z, z4 = (0, 3), (0, 4)
    long0 = lambda g: torch.zeros(0, dtype=torch.long)
    return {
        "l1_loss": (F.l1_loss, lambda g: [_f(z, g), _f(z, g)]),
        "mse_loss": (F.mse_loss, lambda g: [_f(z, g), _f(z, g)]),
        "smooth_l1_loss": (F.smooth_l1_loss, lambda g: [_f(z, g), _f(z, g)]),
        "huber_loss": (F.huber_loss, lambda g: [_f(z, g), _f(z, g)]),
        "soft_margin_loss": (F.soft_margin_loss, lambda g: [_f(z, g), _f(z, g)]),
        "binary_cross_entropy": (F.binary_cross_entropy, lambda g: [torch.rand(z, generator=g), torch.rand(z, generator=g)]),
        "binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits,
                                             lambda g: [_f(z, g), torch.rand(z, generator=g)]),
        "kl_div": (F.kl_div, lambda g: [_f(z, g), _f(z, g)]),
        "kl_div_log_target": (lambda a, b, reduction: F.kl_div(a, b, reduction=reduction, log_target=True),
                              lambda g: [_f(z, g), _f(z, g)]),
        "poisson_nll_loss": (F.poisson_nll_loss, lambda g: [_f(z, g), _f(z, g)]),
        "poisson_nll_loss_full": (lambda a, b, reduction: F.poisson_nll_loss(a, b, log_input=False, full=True,
                                                                           reduction=reduction),
                                  lambda g: [torch.rand(z, generator=g), torch.rand(z, generator=g)]),
        "gaussian_nll_loss": (F.gaussian_nll_loss, lambda g: [_f(z, g), _f(z, g), torch.ones(z)]),
        "cross_entropy": (F.cross_entropy, lambda g: [_f(z4, g), long0(g)]),
        "cross_entropy_smoothing": (lambda a, b, reduction: F.cross_entropy(a, b, reduction=reduction,
                                                                           label_smoothing=0.1),
                                    lambda g: [_f(z4, g), long0(g)]),
        "cross_entropy_probs": (F.cross_entropy, lambda g: [_f(z4, g), torch.rand(z4, generator=g)]),
        "nll_loss": (F.nll_loss, lambda g: [_f(z4, g), long0(g)]),
        "nll_loss_weight": (lambda a, b, reduction: F.nll_loss(a, b, weight=torch.ones(4, device=a.device),
                                                               reduction=reduction),
                            lambda g: [_f(z4, g), long0(g)]),
        "multi_margin_loss": (F.multi_margin_loss, lambda g: [_f(z4, g), long0(g)]),
        "multilabel_margin_loss": (F.multilabel_margin_loss,
                                   lambda g: [_f(z4, g), torch.zeros(0, 4, dtype=torch.long)]),
        "multilabel_soft_margin_loss": (F.multilabel_soft_margin_loss, lambda g: [_f(z4, g), torch.zeros(z4)]),
        "hinge_embedding_loss": (F.hinge_embedding_loss, lambda g: [_f(z, g), torch.ones(z)]),
        "margin_ranking_loss": (F.margin_ranking_loss, lambda g: [_f(z, g), _f(z, g), torch.ones(z)]),
        "cosine_embedding_loss": (F.cosine_embedding_loss, lambda g: [_f(z4, g), _f(z4, g), torch.ones(0)]),
        "triplet_margin_loss": (F.triplet_margin_loss, lambda g: [_f(z4, g), _f(z4, g), _f(z4, g)]),
        "triplet_margin_with_distance_loss": (F.triplet_margin_with_distance_loss,
                                              lambda g: [_f(z4, g), _f(z4, g), _f(z4, g)]),
        "ctc_loss": (lambda lp, t, il, tl, reduction: F.ctc_loss(lp, t, il, tl, reduction=reduction),
                     lambda g: [_f((5, 0, 4), g).log_softmax(-1), torch.zeros(0, 2, dtype=torch.long),
                                torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)]),
        "linear_cross_entropy": (lambda x, w, t, reduction: F.linear_cross_entropy(x, w, t, reduction=reduction),
                                 lambda g: [_f((0, 8), g), _f((4, 8), g), long0(g)]),
    }


LOSSES = _loss_cases()


def _loss(name, reduction, dev):
    fn, make = LOSSES[name]
    args = [a.to(dev) for a in make(torch.Generator().manual_seed(0))]
    leaves = [a.requires_grad_() for a in args if a.dtype.is_floating_point and a.dim() and a is args[0]
              or (a.dtype.is_floating_point and name in ("triplet_margin_loss", "margin_ranking_loss",
                                                          "cosine_embedding_loss", "linear_cross_entropy",
                                                          "triplet_margin_with_distance_loss"))]
    try:
        out = fn(*args, reduction=reduction)
    except Exception as e:                              # CPU's errors must be hpu's errors
        return type(e), ()
    grads = torch.autograd.grad(out.sum(), leaves, allow_unused=True)
    return out, grads


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    b = b.cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(torch.nan_to_num(a, 7.0, 8.0, 9.0), torch.nan_to_num(b, 7.0, 8.0, 9.0))


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_on_zero_elements_equals_cpu(name, reduction, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    a, ga = _loss(name, reduction, "cpu")
    b, gb = _loss(name, reduction, "hpu")
    htcore.mark_step()
    if isinstance(a, type):
        assert b is a, f"CPU raises {a.__name__}, hpu gave {b}"
        return
    assert not isinstance(b, type), f"hpu raises {b.__name__}"
    if (name, reduction) in CPU_UNDEFINED:
        assert (b.shape, b.dtype) == (a.shape, a.dtype)
    else:
        assert _same(a, b), f"{a} vs {b.cpu()}"
    assert len(ga) == len(gb) and all(_same(x, y) for x, y in zip(ga, gb))


REDUCTIONS = {
    "sum": lambda x, d, k: x.sum() if d is None else x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean() if d is None else x.mean(d, keepdim=k),
    "nansum": lambda x, d, k: x.nansum() if d is None else x.nansum(d, keepdim=k),
    "nanmean": lambda x, d, k: x.nanmean() if d is None else x.nanmean(d, keepdim=k),
    "prod": lambda x, d, k: x.prod() if d is None else x.prod(d, keepdim=k),
    "amax": lambda x, d, k: x.amax() if d is None else x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin() if d is None else x.amin(d, keepdim=k),
    "max": lambda x, d, k: x.max() if d is None else x.max(d, keepdim=k)[0],
    "argmin": lambda x, d, k: x.argmin() if d is None else x.argmin(d, keepdim=k),
    "std": lambda x, d, k: x.std() if d is None else x.std(d, keepdim=k),
    "var": lambda x, d, k: x.var() if d is None else x.var(d, keepdim=k),
    "var_correction0": lambda x, d, k: x.var(correction=0) if d is None else x.var(d, keepdim=k, correction=0),
    "std_mean": lambda x, d, k: torch.stack(torch.std_mean(x) if d is None else torch.std_mean(x, d, keepdim=k)),
    "var_mean": lambda x, d, k: torch.stack(torch.var_mean(x) if d is None else torch.var_mean(x, d, keepdim=k)),
    "norm": lambda x, d, k: x.norm() if d is None else x.norm(dim=d, keepdim=k),
    "vector_norm_1": lambda x, d, k: torch.linalg.vector_norm(x, 1, dim=d, keepdim=k),
    "vector_norm_inf": lambda x, d, k: torch.linalg.vector_norm(x, float("inf"), dim=d, keepdim=k),
    "logsumexp": lambda x, d, k: x.logsumexp(tuple(range(x.dim())) if d is None else d, keepdim=k),
    "median": lambda x, d, k: x.median() if d is None else x.median(d, keepdim=k)[0],
    "nanmedian": lambda x, d, k: x.nanmedian() if d is None else x.nanmedian(d, keepdim=k)[0],
    "all": lambda x, d, k: x.all() if d is None else x.all(d, keepdim=k),
    "any": lambda x, d, k: x.any() if d is None else x.any(d, keepdim=k),
    "count_nonzero": lambda x, d, k: x.count_nonzero() if d is None else x.count_nonzero(d),
    "cumsum": lambda x, d, k: x.cumsum(d or 0),
    "cumprod": lambda x, d, k: x.cumprod(d or 0),
    "logcumsumexp": lambda x, d, k: x.logcumsumexp(d or 0),
    "cummax": lambda x, d, k: x.cummax(d or 0)[0],
    "softmax": lambda x, d, k: x.softmax(d or 0),
    "log_softmax": lambda x, d, k: x.log_softmax(d or 0),
    "aminmax": lambda x, d, k: torch.stack(torch.aminmax(x) if d is None else torch.aminmax(x, dim=d, keepdim=k)),
    "mode": lambda x, d, k: x.mode(d or 0, keepdim=k)[0],
    "kthvalue": lambda x, d, k: x.kthvalue(1, d or 0, keepdim=k)[0],
    "sort": lambda x, d, k: x.sort(d or 0)[0],
    "topk0": lambda x, d, k: x.topk(0, d or 0)[0],
    "quantile": lambda x, d, k: torch.quantile(x, 0.5, dim=d, keepdim=k),
    "dist": lambda x, d, k: torch.dist(x, torch.zeros_like(x)),
}
CASES = [(shape, d, k) for shape in [(0,), (0, 3), (3, 0)] for d in [None, 0, 1] if d is None or d < len(shape)
         for k in ([False, True] if d is not None else [False])]


def _reduce(fn, x, d, k, dev):
    xx = x.to(dev).requires_grad_()
    try:
        out = fn(xx, d, k)
    except Exception as e:                              # CPU's errors must be hpu's errors
        return type(e), None
    grad = None
    if out.requires_grad:
        grad = torch.autograd.grad(out.sum(), xx, allow_unused=True)[0]
    return out, grad


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_on_zero_elements_equals_cpu(name, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    fn = REDUCTIONS[name]
    for shape, d, k in CASES:
        x = torch.randn(shape)
        a, ga = _reduce(fn, x, d, k, "cpu")
        b, gb = _reduce(fn, x, d, k, "hpu")
        htcore.mark_step()
        where = f"{name}{shape} dim={d} keepdim={k}"
        if isinstance(a, type):
            assert b is a, f"{where}: CPU raises {a.__name__}, hpu gave {b}"
            continue
        assert not isinstance(b, type), f"{where}: hpu raises {b.__name__}"
        assert _same(a, b) and _same(ga, gb), f"{where}: {a} {ga} vs {b.cpu()} {gb}"
