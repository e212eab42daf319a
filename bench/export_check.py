"""Check an exported model against ours (issue 24, item 2).

    python3 bench/export_check.py MODEL.safetensors MODEL.sample.safetensors [--json OUT]

Loads the weights into the reference module (runtime/python/tokitai_moe.py)
with load_state_dict(strict=True) and runs it on the sample's inputs:

1. in float64, against our forward on the exact oracles in f64
   (`y_reference`, same weights, same inputs, no rounding on either side):
   the top-2 routes must be the same and every output within
   TOL = 1e-9 * max(1, max|y_reference|) (f64 rounding of two summation
   orders: a GEMM of K <= 4096 terms in f64 is off by at most about
   K * 2^-53 = 4.5e-13 relative, LayerNorm and the softmax add a few
   ulps; 1e-9 leaves room without hiding a wrong weight, which moves
   outputs by 1e-4 or more);
2. in float32 (and float16 on a GPU), reporting the largest difference
   from the exact outputs, beside that of our own training-precision
   forward (`y_trained`): what a PyTorch user sees of the precision.

Exit 0 when check 1 holds, 1 when it does not.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "python"))
import tokitai_moe  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("sample")
    ap.add_argument("--json")
    a = ap.parse_args()
    sample, smeta = tokitai_moe.read_safetensors(a.sample)
    x = sample["x"].double()
    y_ref = sample["y_reference"].double()
    y_trained = sample["y_trained"].double()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = {"samples": x.shape[0], "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "trained_device": smeta.get("trained_device")}

    m64 = tokitai_moe.load(a.model, dtype=torch.float64, device=dev)
    with torch.no_grad():
        y64 = m64(x.to(dev)).cpu()
        routes_ok = True
        if "top2" in sample:
            _, _, idx = m64.route(x.to(dev))
            ours = sample["top2"].long().sort(dim=1).values
            routes_ok = bool(torch.equal(idx.cpu().sort(dim=1).values, ours))
    scale = max(1.0, y_ref.abs().max().item())
    tol = 1e-9 * scale
    diff64 = (y64 - y_ref).abs().max().item()
    out.update({"strict_load": True, "f64_max_abs_diff": diff64, "f64_tolerance": tol, "routes_equal": routes_ok})

    precisions = [torch.float32] + ([torch.float16] if dev == "cuda" else [])
    for dt in precisions:
        m = tokitai_moe.load(a.model, dtype=dt, device=dev)
        with torch.no_grad():
            y = m(x.to(device=dev, dtype=dt)).double().cpu()
        out["torch_%s_max_abs_diff_from_exact" % str(dt).split(".")[-1]] = (y - y_ref).abs().max().item()
    out["ours_trained_max_abs_diff_from_exact"] = (y_trained - y_ref).abs().max().item()
    out["max_abs_exact_output"] = y_ref.abs().max().item()
    ok = routes_ok and diff64 <= tol
    out["ok"] = ok
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
