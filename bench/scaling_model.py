#!/usr/bin/env python3
"""Predicted data-parallel efficiency of tycho (docs/scaling.md), from measured inputs.

Per global mini-batch of B positions on W ranks (every rank steps the same optimizer):

    t(W) = m(B, W) * t_pos + t_allreduce(S, W) + t_opt
    m(B, W)       = B / W                                  sharding = "replicated"
                  ~ B / W + z_W * sqrt(B / W * (1 - 1/W))  sharding = "patterns" (largest share)
    t_allreduce   = 2 (W - 1) / W * S / busbw + latency     (ring all-reduce; 0 for W = 1)
    efficiency    = t(1) / (W * t(W))

t_pos: one device's time per position (tycho_bench_cpu / tycho_bench_cuda), S: bytes summed per
batch (object + probe gradients), busbw: the reducer's bus bandwidth (nccl-tests' busbw),
t_opt: the optimizer steps on the replicated parameters (not divided by W).
z_W: expected largest of W standard normal deviates (Tippett 1925): 0.56, 1.03, 1.42 for 2, 4, 8.

Usage: bench/scaling_model.py            (the tables of docs/scaling.md)
       bench/scaling_model.py --t-pos-us 3.1 --object 1100 1100 --window 128 --busbw-GBps 350
"""
import argparse
import math

Z_MAX = {1: 0.0, 2: 0.5642, 4: 1.0294, 8: 1.4236, 16: 1.7660}


def largest_share(batch, world, sharding):
    if world == 1:
        return batch
    mean = batch / world
    if sharding == "replicated":
        return math.ceil(mean)
    return mean + Z_MAX[world] * math.sqrt(mean * (1 - 1 / world))


def batch_time_us(batch, world, t_pos_us, bytes_reduced, busbw_GBps, latency_us, t_opt_us, sharding):
    t = largest_share(batch, world, sharding) * t_pos_us + t_opt_us
    if world > 1:
        t += 2 * (world - 1) / world * bytes_reduced / (busbw_GBps * 1e3) + latency_us
    return t


def efficiency(batch, world, **kw):
    return batch_time_us(batch, 1, **kw) / (world * batch_time_us(batch, world, **kw))


def table(title, object_px, window, t_pos_us, busbw_GBps, latency_us, bytes_per_value=8, batches=(256, 1024, 4096),
          worlds=(2, 4, 8), opt_GBps=3000.0):
    h, w = object_px
    values = h * w + window * window
    S = bytes_per_value * values
    # Adam reads parameter, gradient, m, v and writes parameter, m, v: 7 passes over each array.
    t_opt_us = 7 * S / (opt_GBps * 1e3)
    print(f"\n{title}")
    print(f"object {h} x {w}, window {window}^2, S = {S / 2**20:.2f} MiB per batch, t_pos = {t_pos_us} us, "
          f"busbw = {busbw_GBps} GB/s, latency = {latency_us} us, t_opt = {t_opt_us:.0f} us")
    print("| batch B | sharding | " + " | ".join(f"W = {x}" for x in worlds) + " |")
    print("|---|---|" + "---|" * len(worlds))
    for b in batches:
        for sh in ("replicated", "patterns"):
            cells = [f"{100 * efficiency(b, x, t_pos_us=t_pos_us, bytes_reduced=S, busbw_GBps=busbw_GBps, latency_us=latency_us, t_opt_us=t_opt_us, sharding=sh):.0f} %" for x in worlds]
            print(f"| {b} | {sh} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--t-pos-us", type=float)
    ap.add_argument("--object", type=int, nargs=2)
    ap.add_argument("--window", type=int)
    ap.add_argument("--busbw-GBps", type=float, default=350.0)
    ap.add_argument("--latency-us", type=float, default=20.0)
    ap.add_argument("--float64", action="store_true")
    a = ap.parse_args()
    if a.t_pos_us and a.object and a.window:
        table("Your case", a.object, a.window, a.t_pos_us, a.busbw_GBps, a.latency_us, 16 if a.float64 else 8)
        return
    # The cases of docs/scaling.md.
    table("A. CPU, this 2-core machine, MoS2, one core per rank (measured t_pos; shared-memory MPI)", (220, 197), 96,
          212.0, 5.0, 50.0,
          batches=(128, 768), worlds=(2,), opt_GBps=10.0)
    table("B. 4 x H200 NVLink, 128^2 windows, object 1100^2 (t_pos assumed)", (1100, 1100), 128, 2.0, 350.0, 20.0)
    table("C. 4 x H200 NVLink, 256^2 windows, object 2048^2 (t_pos assumed)", (2048, 2048), 256, 6.0, 350.0, 20.0)
    table("D. 2 nodes x 4 H200, InfiniBand between nodes, case C", (2048, 2048), 256, 6.0, 40.0, 30.0,
          worlds=(8,))


if __name__ == "__main__":
    main()
