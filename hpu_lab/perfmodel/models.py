"""Reference models for the Gaudi clock's validation, written here (torchvision does not load
beside this torch build; transformers is not a dependency): ResNet-50 v1.5 and the BERT family
(BERT Base/Large, RoBERTa Base/Large, DistilBERT, ALBERT large-v2 / xxlarge-v1) with a SQuAD head
or a masked-LM head, as plain nn.Modules. The BERT variants differ only in what costs differently
on a device: the sizes, the embeddings (RoBERTa: 50,265 words, one segment; DistilBERT: no
segment embedding; ALBERT: 128-wide embeddings projected to the hidden size), ALBERT's one layer
shared by all depths (one set of weights for the optimizer, gradients summed over the uses), the
activation (ALBERT v2: tanh-approximated GELU) and dropout (as each checkpoint's config.json has it:
0.1 for BERT, RoBERTa, DistilBERT, plus DistilBERT's dropout before its QA head; none for
albert-large-v2 and albert-xxlarge-v1).

They are built on the meta device and moved to "hpu" with ``to_empty``: parameters are device
buffers that are never filled, which is all ``perfmodel.estimate`` needs (it traces, it does not
run).

Dropout (BERT's p=0.1 on the embeddings, the attention probabilities and both residual branches,
as in the published runs) is costed by a stand-in, ``KeepMask``: a multiply by a keep-mask, a
bool device tensor of the activation's shape made once by the step builder and never filled.
hpu_lab draws real dropout masks on the host, which would make tracing slow (and a seq-512 batch's
attention masks do not fit this machine's RAM); the stand-in moves the bytes Gaudi's dropout kernel
moves (forward: read x, write y, one mask byte per element; backward: read the gradient and the
mask, write the input gradient). At seq 384-512 dropout, mostly on the attention probabilities,
adds ~10% to a BERT step's HBM traffic, so it is not left out.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ------------------------------------------------------------------ ResNet-50 v1.5

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)   # v1.5: stride here
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + idt)


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ------------------------------------------------------------------ BERT

class KeepMask(nn.Module):
    """Dropout's device traffic without drawing random numbers: ``x * keep`` where ``keep`` is a bool
    device tensor of x's shape set by the step builder (``None``: no dropout, the identity)."""

    def __init__(self):
        super().__init__()
        self.keep = None

    def forward(self, x):
        return x if self.keep is None else x * self.keep


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, act="none"):
        super().__init__()
        self.heads, self.act = heads, act         # act: F.gelu's approximate ("tanh": ALBERT v2's gelu_new)
        self.drop_att, self.drop_out, self.drop_ffn = KeepMask(), KeepMask(), KeepMask()
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ffn)
        self.ff2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        att = self.drop_att(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1))
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.drop_out(self.out(ctx)))
        return self.ln2(x + self.drop_ffn(self.ff2(F.gelu(self.ff1(x), approximate=self.act))))


class Bert(nn.Module):
    """BERT encoder; ``head``: "squad" (start/end logits of every token) or "pretrain" (the masked-LM
    head: dense + GELU + LayerNorm, then vocabulary logits of ``predictions`` positions per
    sequence: max_predictions_per_seq, 20 for phase 1 and 80 for phase 2 of the reference
    pretraining, taken as the first positions (the cost is the same); Hugging Face's
    BertForMaskedLM computes the logits of every position: ``predictions=seq``).

    The variants: ``segments`` token-type embeddings (0: none), ``embed`` the width of ALBERT's
    factorized embeddings (projected to ``hidden``; None: ``hidden``), ``shared`` one layer applied
    ``layers`` times (ALBERT), ``act`` the GELU approximation, ``head_dropout`` a dropout before the
    SQuAD head (DistilBERT's qa_dropout)."""

    def __init__(self, layers=24, hidden=1024, heads=16, ffn=4096, vocab=30522, max_pos=512, head="squad",
                 predictions=20, segments=2, embed=None, shared=False, act="none", head_dropout=False):
        super().__init__()
        width = embed or hidden
        self.word = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_pos, width)
        self.segment = nn.Embedding(segments, width) if segments else None
        self.ln = nn.LayerNorm(width)
        self.drop = KeepMask()
        self.project = nn.Linear(width, hidden) if embed else None
        if shared:
            self.layers = nn.ModuleList([BertLayer(hidden, heads, ffn, act)] * layers)
        else:
            self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn, act) for _ in range(layers))
        self.head_kind, self.predictions = head, predictions
        self.head_drop = KeepMask() if head_dropout else None
        if head == "pretrain":
            self.transform, self.transform_ln = nn.Linear(hidden, hidden), nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, 2 if head == "squad" else vocab)

    def forward(self, ids, pos, types):
        x = self.word(ids) + self.pos(pos)
        if self.segment is not None:
            x = x + self.segment(types)
        x = self.drop(self.ln(x))
        if self.project is not None:
            x = self.project(x)
        for layer in self.layers:
            x = layer(x)
        if self.head_kind == "pretrain":
            x = self.transform_ln(F.gelu(self.transform(x[:, :self.predictions])))
        if self.head_drop is not None:
            x = self.head_drop(x)
        return self.head(x)

    def keep_masks(self, batch: int, seq: int, device="hpu"):
        """Give every KeepMask its (unfilled) bool keep-mask: one for the attention probabilities,
        one for the hidden states (shared by all layers: the cost is the same)."""
        att = torch.empty(batch, self.layers[0].heads, seq, seq, dtype=torch.bool, device=device)
        hid = torch.empty(batch, seq, self.head.in_features, dtype=torch.bool, device=device)
        self.drop.keep = torch.empty(batch, seq, self.ln.normalized_shape[0], dtype=torch.bool, device=device)
        if self.head_drop is not None:
            self.head_drop.keep = hid
        for layer in self.layers:
            layer.drop_att.keep, layer.drop_out.keep, layer.drop_ffn.keep = att, hid, hid


def bert_large(**kw) -> Bert:
    return Bert(24, 1024, 16, 4096, **kw)


def bert_base(**kw) -> Bert:
    return Bert(12, 768, 12, 3072, **kw)


# the Hugging Face checkpoints' config.json sizes
def roberta_large(**kw) -> Bert:
    return Bert(24, 1024, 16, 4096, vocab=50265, max_pos=514, segments=1, **kw)


def roberta_base(**kw) -> Bert:
    return Bert(12, 768, 12, 3072, vocab=50265, max_pos=514, segments=1, **kw)


def distilbert_base(**kw) -> Bert:
    return Bert(6, 768, 12, 3072, segments=0, head_dropout=True, **kw)


def albert_large_v2(**kw) -> Bert:
    return Bert(24, 1024, 16, 4096, vocab=30000, embed=128, shared=True, act="tanh", **kw)


def albert_xxlarge_v1(**kw) -> Bert:
    return Bert(12, 4096, 64, 16384, vocab=30000, embed=128, shared=True, **kw)


# ------------------------------------------------------------------ training steps (for estimate)

def on_hpu(make):
    """Build ``make()`` on the meta device, then give it (unfilled) hpu buffers."""
    with torch.device("meta"):
        m = make()
    return m.to_empty(device="hpu")


def resnet50_step(batch: int):
    """(step, args): one SGD-momentum training step of ResNet-50 on ``batch`` 224x224 images, bf16
    autocast (the published runs use LARS: SGD plus a per-layer norm, a small extra)."""
    import hpu_lab.core as htcore
    model = on_hpu(ResNet50)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    x = torch.empty(batch, 3, 224, 224, device="hpu")
    y = torch.empty(batch, dtype=torch.long, device="hpu")

    def step(x, y):
        with torch.autocast("hpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        htcore.mark_step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        htcore.mark_step()
    return step, (x, y)


def bert_step(make, batch: int, seq: int, head: str = "squad", predictions: int = 20, dropout: bool = True,
              trainer: bool = False, pipelining: bool = False):
    """(step, args): one FusedAdamW training step of a BERT ``make`` (bert_large / bert_base) on
    ``batch`` sequences of ``seq`` tokens, bf16 autocast, dropout costed by its stand-in unless
    ``dropout=False`` (the published pretraining runs use LAMB: the same traffic per parameter as
    AdamW, plus a norm).

    ``trainer=True``: the step as optimum-habana's GaudiTrainer runs it (v1.4.0, the SynapseAI 1.7
    release of the [HB] runs; optimum/habana/transformers/trainer.py): forward and backward, then
    ``torch.isnan(loss) or torch.isinf(loss)`` read on the host (``logging_nan_inf_filter``, True by
    default: a host sync every step), the loss added to the running total, mark_step, gradients
    clipped by FusedClipNorm (max_grad_norm 1.0; ``use_fused_clip_norm`` in the Gaudi config), the
    FusedAdamW step, zero_grad, mark_step.

    ``pipelining=True``: the Trainer's ``pipelining_fwd_bwd`` (a mark_step between the forward and
    the backward, optimum-habana's ``GaudiTrainer.training_step``), so the device runs the forward
    while the host traces the backward."""
    import hpu_lab.core as htcore
    from hpu_lab.hpex.normalization import FusedClipNorm
    from hpu_lab.hpex.optimizers import FusedAdamW
    from .estimate import sync_point
    model = on_hpu(lambda: make(head=head, predictions=predictions))
    if dropout:
        model.keep_masks(batch, seq)
    opt = FusedAdamW(model.parameters(), lr=1e-4)
    ids = torch.empty(batch, seq, dtype=torch.long, device="hpu")
    pos = torch.empty(batch, seq, dtype=torch.long, device="hpu")
    types = torch.empty(batch, seq, dtype=torch.long, device="hpu")
    if head == "squad":
        target = torch.empty(batch, dtype=torch.long, device="hpu")
    else:
        target = torch.empty(batch, predictions, dtype=torch.long, device="hpu")

    clip = FusedClipNorm(model.parameters(), 1.0) if trainer else None
    total = torch.zeros(()).to("hpu") if trainer else None      # the Trainer's running loss

    def step(ids, pos, types, target):
        nonlocal total
        with torch.autocast("hpu", dtype=torch.bfloat16):
            logits = model(ids, pos, types)
            if head == "squad":
                start, end = logits.float().unbind(-1)
                loss = (F.cross_entropy(start, target) + F.cross_entropy(end, target)) / 2
            else:
                loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        if pipelining:
            htcore.mark_step()
        loss.backward()
        if trainer:
            torch.isnan(loss), torch.isinf(loss)
            sync_point("logging_nan_inf_filter: torch.isnan(loss) or torch.isinf(loss)")
            total = total + loss.detach()
        htcore.mark_step()
        if trainer:
            clip.clip_norm(model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)
        htcore.mark_step()
    return step, (ids, pos, types, target)


def gemm_step(m: int, n: int, k: int, dtype=torch.bfloat16):
    """(step, args): one (m, k) @ (k, n) matrix multiply on the device, as a matmul benchmark
    times it (``torch.mm`` in a loop; each launch is one recipe)."""
    a = torch.empty(m, k, dtype=dtype, device="hpu")
    b = torch.empty(k, n, dtype=dtype, device="hpu")

    def step(a, b):
        return torch.mm(a, b)
    return step, (a, b)
