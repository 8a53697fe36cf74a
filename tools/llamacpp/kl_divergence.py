#!/usr/bin/env python3
"""KL divergence of next-token distributions between two logit dumps (python3 stdlib only).

usage: tools/llamacpp/kl_divergence.py BASE.npy OTHER.npy [--json]

Both files are float32 [rows, n_vocab] (`dump_logits --logits-out`, `moengine generate
--logits-out`), row i the logits after token i. Per row, KL(softmax(BASE) || softmax(OTHER))
in double; prints the mean, the 99th percentile and the maximum over the rows, and the
fraction of rows whose most likely token is the same (as `moengine bench kv-accuracy`).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_logits import load_npy  # noqa: E402


def log_softmax(row):
    m = max(row)
    s = math.log(sum(math.exp(x - m) for x in row)) + m
    return [x - s for x in row]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    (ra, va), a = load_npy(args.base)
    (rb, vb), b = load_npy(args.other)
    if (ra, va) != (rb, vb):
        sys.exit(f"shapes differ: {ra}x{va} vs {rb}x{vb}")
    kl, agree = [], 0
    for r in range(ra):
        pa = log_softmax(a[r * va:(r + 1) * va])
        pb = log_softmax(b[r * va:(r + 1) * va])
        kl.append(max(0.0, sum(math.exp(x) * (x - y) for x, y in zip(pa, pb))))
        agree += max(range(va), key=pa.__getitem__) == max(range(va), key=pb.__getitem__)
    mean = sum(kl) / ra
    ordered = sorted(kl)
    out = {"rows": ra, "kl_mean": mean, "kl_p99": ordered[min(ra - 1, int(0.99 * ra))], "kl_max": ordered[-1],
           "top1_agreement": agree / ra}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"rows {ra}: mean KL {out['kl_mean']:.3g}, p99 {out['kl_p99']:.3g}, max {out['kl_max']:.3g}, "
              f"top-1 = base {100 * out['top1_agreement']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
