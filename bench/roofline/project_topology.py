#!/usr/bin/env python3
"""Project dsv4-roofline's measured layer table onto the field report's topology.

Reads the layer table (dsv4-roofline --model CKPT --no-kernels) and the kernel table
(dsv4-roofline) of one run and prints, with every step of the arithmetic, the decode step
of the release model (40 backbone layers, Engram at 2 of them, the head) on A800-40GB GPUs
as TP x PP with the field report's layout. The model of the projection (bench/RESULTS.md,
"Projection to the field report's topology"):

  - bytes-bound kernels (linear*, moe_up, moe_down) keep their measured ratio to the floor
    and read 1/TP of the bytes at the A800's bandwidth: t * (BW_H200 / BW_A800) / TP;
  - every other kernel is latency-bound: t * (SM clock H200 / SM clock A800), no TP gain;
  - the 2-layer checkpoint's table holds 2 backbone layers + 1 Engram module + the head:
    the Engram and head kernels are taken out (their kernel-table rows at the same token
    count), the rest divided by 2 is one backbone layer;
  - all-reduces: 2 per layer, AR_US each (not measured here: no multi-GPU machine);
    one stage-to-stage transfer of P2P_US per step (the field report's measurement).

Usage: project_topology.py LAYERS.txt KERNELS.txt [--ar-us 15] [--accept 2.74]
"""
import argparse
import re
import sys

BW_H200_NOMINAL = 4.8e12   # bytes/s, H200 HBM3e
BW_A800_NOMINAL = 1.555e12  # bytes/s, A800-40GB HBM2 (the field report's figure)
CLK_H200 = 1980e6           # SM clock measured by nvidia-smi in the runs
CLK_A800 = 1410e6           # A800 boost clock
LAYERS, ENGRAM_LAYERS, TP, PP = 40, 2, 8, 2
P2P_US = 15.0               # field report: 14 KB stage-to-stage over RDMA


def blocks(path):
    """The layer table's steps: {title: {kernel: (launches, ms)}}."""
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"^(decode|verify|draft), (.*?) at length .*: step ([0-9.]+) ms", line)
        if m:
            cur = out.setdefault(m.group(1) + ", " + m.group(2), {})
            cur["_graph_ms"] = float(m.group(3))
            continue
        m = re.match(r"^  op by op .* ([0-9.]+) ms in \d+ kernels", line)
        if m and cur is not None:
            cur["_kernels_ms"] = float(m.group(1))
            continue
        m = re.match(r"^  (\S.*?)\s{2,}(\d+)\s+([0-9.]+)\s+[0-9.]+%\s+[0-9.]+$", line)
        if m and cur is not None:
            cur[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    # Per-kernel times come from the op-by-op pass (a CUDA event pair around each launch);
    # scale them so that they add up to the graph-replayed step.
    for step in out.values():
        g = step.pop("_graph_ms") / step.pop("_kernels_ms")
        for k, (n, ms) in step.items():
            step[k] = (n, ms * g)
        step["_scale"] = (0, g)
    return out


def kernel_us(path, op, n):
    for line in open(path):
        f = line.split()
        if line.startswith(op) and len(f) > 3 and not re.search(r"cpu-order|prepass|fused", line):
            cols = line[len(op):].split()
            if cols and cols[0] == str(n):
                return float(cols[1])
    sys.exit("no kernel-table row %r at n=%d" % (op, n))


def bytes_bound(name):
    return name.startswith("linear") or name.startswith("moe_up") or name.startswith("moe_down")


def project(title, step, kernels, n, ar_us):
    bw = BW_H200_NOMINAL / BW_A800_NOMINAL
    clk = CLK_H200 / CLK_A800
    head = kernel_us(kernels, "head bf16 129280x5120 -> f32", n) / 1e3
    eng_lin = (kernel_us(kernels, "engram wkv 25600x6144", n)
               + kernel_us(kernels, "main_proj 5120x15360", n)) / 1e3
    eng_lat = sum(ms for k, (_, ms) in step.items() if k.startswith("engram"))
    once_lat = sum(ms for k, (_, ms) in step.items() if k.startswith(("embed", "sample")))
    step = dict(step)
    g = step.pop("_scale")[1]
    print("%s: the op-by-op kernel times scaled by %.3f (graph step / kernel sum)" % (title, g))
    b = sum(ms for k, (_, ms) in step.items() if bytes_bound(k)) - head - eng_lin
    lat = sum(ms for k, (_, ms) in step.items() if not bytes_bound(k)) - eng_lat - once_lat
    print("%s (H200 kernels, ms): bytes-bound %.3f (head %.3f, Engram linears %.3f), "
          "latency-bound %.3f (Engram %.3f, embed+sample %.3f)" %
          (title, b + head + eng_lin, head, eng_lin, lat + eng_lat + once_lat, eng_lat, once_lat))
    layer_b, layer_l = b / 2 * bw / TP, lat / 2 * clk
    eng = eng_lin * bw + eng_lat * clk          # Engram replicated on its stage (no TP split)
    hd = head * bw / TP + once_lat * clk
    comm = LAYERS * 2 * ar_us / 1e3 + (PP - 1) * P2P_US / 1e3
    total = LAYERS * (layer_b + layer_l) + ENGRAM_LAYERS * eng + hd + comm
    print("  one backbone layer on A800, TP%d: %.3f/2 x %.3f / %d = %.4f ms bytes-bound + "
          "%.3f/2 x %.3f = %.4f ms latency-bound" % (TP, b, bw, TP, layer_b, lat, clk, layer_l))
    print("  Engram module (replicated): %.3f x %.3f + %.3f x %.3f = %.4f ms; head / %d + embed + "
          "sample: %.4f ms" % (eng_lin, bw, eng_lat, clk, eng, TP, hd))
    print("  all-reduces %d x 2 x %.0f us + %d stage transfer x %.0f us = %.3f ms" %
          (LAYERS, ar_us, PP - 1, P2P_US, comm))
    print("  step = %d x %.4f + %d x %.4f + %.4f + %.3f = %.2f ms" %
          (LAYERS, layer_b + layer_l, ENGRAM_LAYERS, eng, hd, comm, total))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layers")
    ap.add_argument("kernels")
    ap.add_argument("--ar-us", type=float, default=15.0)
    ap.add_argument("--accept", type=float, default=2.74,
                    help="tokens per verify step (field report: 18 ms / 6.56 ms)")
    a = ap.parse_args()
    t = blocks(a.layers)
    print("A800 TP%d x PP%d, %d layers; bandwidth ratio %.3f, clock ratio %.3f, all-reduce %.0f us"
          % (TP, PP, LAYERS, BW_H200_NOMINAL / BW_A800_NOMINAL, CLK_H200 / CLK_A800, a.ar_us))
    c8 = project("decode, batch 8", t["decode, batch 8"], a.kernels, 8, a.ar_us)
    print("C=8 inter-token latency: %.2f ms (field report 24.84 ms)\n" % c8)
    v = project("verify, 1 x 6 rows", t["verify, 1 sequences x 6 rows (anchor + 5 proposals)"],
                a.kernels, 8, a.ar_us)
    d = dict(t["draft, 1 sequences x 5 draft tokens (greedy)"])
    d.pop("_scale")
    clk, bw = CLK_H200 / CLK_A800, BW_H200_NOMINAL / BW_A800_NOMINAL
    db = sum(ms for k, (_, ms) in d.items() if bytes_bound(k))
    dl = sum(ms for k, (_, ms) in d.items() if not bytes_bound(k))
    dr = db * bw / TP + dl * clk
    print("draft, 1 x 5 tokens: %.3f x %.3f / %d + %.3f x %.3f = %.3f ms" % (db, bw, TP, dl, clk, dr))
    print("single stream with DSpark: (%.2f + %.2f) / %.2f tokens per verify = %.2f ms a token "
          "(field report 6.56 ms)" % (v, dr, a.accept, (v + dr) / a.accept))


if __name__ == "__main__":
    main()
