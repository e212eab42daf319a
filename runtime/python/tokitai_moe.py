"""The reference PyTorch module for models exported by `tokitai-train export`.

    from tokitai_moe import load
    model = load("model.safetensors")            # strict load_state_dict
    y = model(x)                                  # x: [B, 96] float

The module is the model tokitai trains (runtime/src/moe/model.rs), written
the way a PyTorch user writes it:

- an MLP is `Linear(96, h) + LayerNorm + GELU`, then `depth` times
  `Linear(h, h) + LayerNorm + GELU`, then `Linear(h, 20)`; GELU is the tanh
  form (`approximate="tanh"`), LayerNorm's eps 1e-5;
- the MoE routes with `Linear(96, 4)` and a softmax, takes the top-2
  experts per sample, and sums their outputs weighted by the two
  probabilities (not renormalised): `y = p0 * E_i0(x) + p1 * E_i1(x)`;
- the dense model is one MLP.

Weights are stored `[out, in]` as `nn.Linear` keeps them. `load` reads the
file's metadata (`tokitai.kind`, `tokitai.hidden`, `tokitai.depth`) to build
the module, then `load_state_dict(strict=True)`. It needs only PyTorch: the
safetensors file is read here if the `safetensors` package is absent.
"""

import json
import struct

import torch
import torch.nn.functional as F
from torch import nn

INPUT_DIM = 96
OUTPUT_DIM = 20
TOP_K = 2
LAYERNORM_EPS = 1e-5


class Layer(nn.Module):
    """Linear + LayerNorm + GELU (tanh form)."""

    def __init__(self, d_in, d_out, eps=LAYERNORM_EPS):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.norm = nn.LayerNorm(d_out, eps=eps)

    def forward(self, x):
        return F.gelu(self.norm(self.linear(x)), approximate="tanh")


class Mlp(nn.Module):
    """An expert, or the dense model."""

    def __init__(self, hidden, depth, eps=LAYERNORM_EPS):
        super().__init__()
        self.layers = nn.ModuleList([Layer(INPUT_DIM, hidden, eps)] + [Layer(hidden, hidden, eps) for _ in range(depth)])
        self.out = nn.Linear(hidden, OUTPUT_DIM)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


class TokitaiMoE(nn.Module):
    """Softmax router, top-2 of `n_experts` MLPs, weights not renormalised."""

    def __init__(self, hidden, depth, n_experts=4, eps=LAYERNORM_EPS):
        super().__init__()
        self.router = nn.Linear(INPUT_DIM, n_experts)
        self.experts = nn.ModuleList([Mlp(hidden, depth, eps) for _ in range(n_experts)])

    def route(self, x):
        """Probabilities, the top-2 of them and their experts."""
        p = torch.softmax(self.router(x), dim=-1)
        w, idx = torch.topk(p, TOP_K, dim=-1)
        return p, w, idx

    def forward(self, x):
        _, w, idx = self.route(x)
        y = x.new_zeros(x.shape[0], OUTPUT_DIM)
        for e, expert in enumerate(self.experts):
            for k in range(TOP_K):
                rows = (idx[:, k] == e).nonzero(as_tuple=True)[0]
                if rows.numel():
                    y.index_add_(0, rows, w[rows, k : k + 1] * expert(x.index_select(0, rows)))
        return y


class TokitaiDense(nn.Module):
    """The dense model: one MLP of the experts' depth."""

    def __init__(self, hidden, depth, eps=LAYERNORM_EPS):
        super().__init__()
        self.mlp = Mlp(hidden, depth, eps)

    def forward(self, x):
        return self.mlp(x)


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "F64": torch.float64, "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64}


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file."""
    try:
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + a : base + b]), dtype=_DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def build(meta):
    """The module a file's metadata describes (weights not loaded)."""
    if meta.get("format") != "tokitai-moe-pytorch/1":
        raise ValueError("not a model exported by tokitai-train export (format %r)" % meta.get("format"))
    hidden, depth = int(meta["tokitai.hidden"]), int(meta["tokitai.depth"])
    eps = float(meta.get("tokitai.layernorm_eps", LAYERNORM_EPS))
    if meta["tokitai.kind"] == "dense":
        return TokitaiDense(hidden, depth, eps)
    return TokitaiMoE(hidden, depth, int(meta["tokitai.n_experts"]), eps)


def load(path, dtype=torch.float32, device="cpu"):
    """The exported model, its weights loaded strictly, in `dtype` on `device`."""
    tensors, meta = read_safetensors(path)
    model = build(meta)
    model.load_state_dict(tensors, strict=True)
    return model.to(dtype=dtype, device=device).eval()
