#!/usr/bin/env python3
"""Compare two float32 [rows, n_vocab] .npy logit dumps (python3 stdlib only, no numpy).

usage: tools/llamacpp/compare_logits.py A.npy B.npy [--n-prompt N] [--atol X] [--rtol X] [--top1]

Row i of each file = logits after consuming token i (prompt ids, then greedy-generated ids),
the layout of `moengine generate --logits-out` and `dump_logits --logits-out`.

Prints per-row max |a-b|, max |a-b| relative to the row's max |a|, and whether the argmax
agrees, then a summary line. With --n-prompt N the two files are taken to be greedy runs:
once the argmax of a row >= N-1 differs, the two engines consumed different tokens from the
next row on, so those rows are reported but left out of the summary ("diverged"); replay one
engine's ids through the other (dump_logits --decode-ids) to compare every row.
Exit status 1 if the row counts differ, an aligned row's argmax differs (with --top1), or an
aligned row exceeds --atol / --rtol (when given).
"""
import argparse
import array
import ast
import struct
import sys


def load_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        sys.exit(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        hlen, off = struct.unpack("<H", data[8:10])[0], 10
    else:
        hlen, off = struct.unpack("<I", data[8:12])[0], 12
    header = ast.literal_eval(data[off:off + hlen].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        sys.exit(f"{path}: need little-endian float32 C-order, got {header}")
    shape = tuple(header["shape"])
    if len(shape) != 2:
        sys.exit(f"{path}: need a 2-D array, got shape {shape}")
    values = array.array("f")
    values.frombytes(data[off + hlen:])
    if sys.byteorder != "little":
        values.byteswap()
    if len(values) != shape[0] * shape[1]:
        sys.exit(f"{path}: {len(values)} values for shape {shape}")
    return shape, values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--n-prompt", type=int, default=None,
                    help="prompt length; rows after the first greedy divergence are left out")
    ap.add_argument("--atol", type=float, default=None)
    ap.add_argument("--rtol", type=float, default=None, help="limit on max|a-b| / max|a| per row")
    ap.add_argument("--top1", action="store_true", help="fail if any row's argmax differs")
    args = ap.parse_args()

    (ra, va), a = load_npy(args.a)
    (rb, vb), b = load_npy(args.b)
    if va != vb:
        print(f"n_vocab differs: {va} vs {vb}")
        return 1
    rows = min(ra, rb)
    if ra != rb:
        print(f"rows differ: {ra} vs {rb}; comparing the first {rows}")
    worst = worst_rel = 0.0
    mismatched = 0
    aligned = rows
    for r in range(rows):
        ar = a[r * va:(r + 1) * va]
        br = b[r * va:(r + 1) * va]
        diff = max(abs(x - y) for x, y in zip(ar, br))
        scale = max(abs(x) for x in ar) or 1.0
        top_a = max(range(va), key=ar.__getitem__)
        top_b = max(range(va), key=br.__getitem__)
        diverged = r >= aligned
        if not diverged:
            worst, worst_rel = max(worst, diff), max(worst_rel, diff / scale)
            mismatched += top_a != top_b
            if args.n_prompt is not None and r >= args.n_prompt - 1 and top_a != top_b:
                aligned = r + 1  # the next rows consumed different greedy tokens
        print(f"row {r:4d}: max|a-b| {diff:.3e}  rel {diff / scale:.3e}  argmax {top_a} {top_b}"
              f"{'' if top_a == top_b else '  MISMATCH'}{'  (diverged)' if diverged else ''}")
    print(f"summary: rows {rows}, aligned {aligned}, max|a-b| {worst:.3e}, max rel {worst_rel:.3e}, "
          f"argmax mismatches {mismatched}")
    bad = ra != rb
    bad |= args.top1 and mismatched > 0
    bad |= args.atol is not None and worst > args.atol
    bad |= args.rtol is not None and worst_rel > args.rtol
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. piped into head
        sys.exit(1)
