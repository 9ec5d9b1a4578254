#!/usr/bin/env python3
"""The seed's example at full size (issue 30): simulated scans of 96 x 96 patterns from 32 x 24 to
1024 x 1024 positions, side by side in one run.

For each size it prints and records the cost per position and iteration (wall time, and the
process's CPU time, which other load on a shared machine skews less), the peak RSS of `tycho
preprocess` and of `tycho reconstruct`, the time to the first iteration (start-up: reading,
preprocessing, planning), and `tycho plan`'s estimate beside the measured figures. The smaller
scans reconstruct straight from the simulate source with their targets in memory; the sizes
given with --disk are prepared once (`tycho preprocess --save-raw-data`, streamed into the file)
and reconstructed with target_residency = "disk". One size (--ranks-size) runs again on 2 ranks
under mpirun (1 thread each): its loss history beside the 1-rank run's, and each rank's count of
patterns read from disk; then once more on 1 and on 2 ranks with deterministic sums, whose loss
history, object and probe must be the same bits. Appends one JSON line per run to bench/results.jsonl.

Usage: bench/scale.py [--sizes 32x24,128,256,512,1024] [--disk 512,1024] [--iterations N]
       [--last-iterations 2] [--ranks-size 512] [--keep]
Big prepared files are deleted after use (1024^2 of uint16 counts is 19 GB; check df -h first).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYCHO = ROOT / "build" / "bin" / "tycho"


def size_of(text):
    if "x" in text:
        a, b = text.split("x")
        return int(a), int(b)
    return int(text), int(text)


def config(scan, dose, threads, extra=""):
    return f"""[data]
source = "simulate"
scan_shape = [{scan[0]}, {scan[1]}]
detector_shape = [96, 96]
dose_e_per_A2 = {dose}
threads = {threads}
[reconstruct]
batch_size = 128
threads = {threads}
{extra}
[output]
previews = false
"""


def run(argv, log=None, env=None):
    """Runs argv; returns (exit status, wall s, its own peak RSS in MiB, CPU s, the stdout lines
    with the time each arrived, s from the start)."""
    t0 = time.monotonic()
    out = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=out, text=True, env=env)
    lines = []
    for line in p.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if log:
        out.close()
    return p.returncode, time.monotonic() - t0, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime, lines


def history(result):
    m = json.loads(zipfile.ZipFile(result).read("manifest.json"))
    return m["history"], m.get("batching", {})


def plan_estimate(cfg):
    """tycho plan's time line: (s per iteration, µs per position·iteration, CPU µs)."""
    r = subprocess.run([str(TYCHO), "plan", str(cfg)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("time") and "per iteration" in line:
            s = float(line.split("~")[1].split(" s per iteration")[0])
            us = float(line.split("(")[1].split(" µs")[0])
            cpu = float(line.split("CPU time ")[1].split(" µs")[0])
            return s, us, cpu
    return None


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="32x24,128,256,512,1024")
    ap.add_argument("--disk", default="512,1024", help="sizes prepared and read per batch from disk")
    ap.add_argument("--iterations", type=int, default=3, help="iterations per run (the first is a warm-up)")
    ap.add_argument("--last-iterations", type=int, default=2, help="iterations of the largest size")
    ap.add_argument("--ranks-size", default="512", help="the size also run on 2 ranks (mpirun); '' for none")
    ap.add_argument("--dose", default="1e5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the work folder's logs and configs")
    args = ap.parse_args()
    if not TYCHO.exists():
        sys.exit("build first: scripts/build")
    sizes = [size_of(s) for s in args.sizes.split(",") if s]
    disk = {size_of(s) for s in args.disk.split(",") if s}
    ranks_size = size_of(args.ranks_size) if args.ranks_size else None
    work = Path(tempfile.mkdtemp(prefix="tycho-scale-", dir=os.environ.get("TYCHO_BENCH_DIR", "/tmp")))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"]).returncode != 0:
        commit += "-dirty"
    cpu_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rows = []
    print(f"{'scan':>11} {'where':>6} {'batches':>8} {'µs/pos·it':>10} {'CPU µs':>8} {'plan µs':>8} {'plan CPU':>9} "
          f"{'prep RSS':>9} {'rec RSS':>8} {'start s':>8} {'load':>5}")
    for scan in sizes:
        positions = scan[0] * scan[1]
        iterations = args.last_iterations if scan == sizes[-1] and len(sizes) > 1 and scan[0] >= 1024 else args.iterations
        cfg = work / f"sim{scan[0]}x{scan[1]}.toml"
        cfg.write_text(config(scan, args.dose, args.threads))
        estimate = plan_estimate(cfg)
        load_before = loadavg()
        row = {"scan_shape": list(scan), "positions": positions, "iterations": iterations, "residency": "memory"}
        source = ["--set", f"reconstruct.iterations={iterations}"]
        if scan in disk:
            prepared = work / f"p{scan[0]}.zip"
            st, wall, rss, cpu, _ = run([str(TYCHO), "preprocess", str(cfg), "--save-raw-data", "-o", str(prepared)],
                                        log=work / f"preprocess{scan[0]}.log")
            if st != 0:
                sys.exit(f"preprocess {scan} failed: see {work}/preprocess{scan[0]}.log")
            row.update(residency="disk", preprocess_s=round(wall, 1), preprocess_cpu_s=round(cpu, 1),
                       preprocess_peak_rss_MiB=round(rss, 1), prepared_MB=round(prepared.stat().st_size / 1e6))
            argv = [str(TYCHO), "reconstruct", "--from", str(prepared), str(cfg), "--set",
                    "reconstruct.target_residency=\"disk\""] + source
        else:
            argv = [str(TYCHO), "reconstruct", str(cfg)] + source
        result = work / f"r{scan[0]}.zip"
        st, wall, rss, cpu, lines = run(argv + ["-o", str(result), "--overwrite"], log=work / f"reconstruct{scan[0]}.log")
        if st != 0:
            sys.exit(f"reconstruct {scan} failed: see {work}/reconstruct{scan[0]}.log")
        h, batching = history(result)
        secs, cpus = h["seconds"], h.get("cpu_seconds", [])
        steady = secs[1:] or secs
        steady_cpu = cpus[1:] or cpus
        # Start-up: from launch to the first iteration's start (its line's arrival less its time).
        first = next((t for t, l in lines if l.lstrip().startswith("iteration")), None)
        startup = (first - secs[0]) if first is not None else None
        row.update(us_per_position_iteration=round(statistics.median(steady) / positions * 1e6, 2),
                   cpu_us_per_position_iteration=round(statistics.median(steady_cpu) / positions * 1e6, 2),
                   s_per_iteration=[round(s, 3) for s in secs], cpu_s_per_iteration=[round(s, 3) for s in cpus],
                   reconstruct_peak_rss_MiB=round(rss, 1), reconstruct_wall_s=round(wall, 1),
                   time_to_first_iteration_s=round(startup, 2) if startup is not None else None,
                   batching=batching, loss=h["loss"], load_average=[load_before, loadavg()])
        if estimate:
            row.update(plan_s_per_iteration=estimate[0], plan_us_per_position_iteration=estimate[1],
                       plan_cpu_us_per_position_iteration=estimate[2])
        rows.append(row)
        print(f"{scan[0]:>5}x{scan[1]:<5} {row['residency']:>6} {batching.get('kind', '?'):>8} "
              f"{row['us_per_position_iteration']:>10.1f} {row['cpu_us_per_position_iteration']:>8.1f} "
              f"{(estimate or (0, 0, 0))[1]:>8.1f} {(estimate or (0, 0, 0))[2]:>9.1f} "
              f"{row.get('preprocess_peak_rss_MiB', 0):>9.0f} {rss:>8.0f} {row['time_to_first_iteration_s'] or 0:>8.1f} "
              f"{load_before:>5.1f}", flush=True)
        if ranks_size == scan:
            two = work / f"r{scan[0]}-2.zip"
            argv2 = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] + argv + [
                "--set", "reconstruct.threads=1", "-o", str(two), "--overwrite"]
            st, wall, rss2, cpu2, _ = run(argv2, log=work / f"reconstruct{scan[0]}-2ranks.log")
            if st != 0:
                sys.exit(f"2 ranks {scan} failed: see {work}/reconstruct{scan[0]}-2ranks.log")
            h2, _ = history(two)
            reads = [l.strip() for l in open(work / f"reconstruct{scan[0]}-2ranks.log") if "patterns read" in l]
            diff = max(abs(a / b - 1) for a, b in zip(h2["loss"], h["loss"]))
            cpu2 = h2.get("cpu_seconds", [])
            row2 = dict(row, ranks=2, threads_per_rank=1, loss=h2["loss"], loss_relative_difference_from_1_rank=diff,
                        s_per_iteration=h2["seconds"], cpu_s_per_iteration=cpu2,
                        us_per_position_iteration=round(statistics.median(h2["seconds"][1:] or h2["seconds"]) /
                                                        positions * 1e6, 2),
                        # rank 0's process only (the result's history is rank 0's)
                        cpu_us_per_position_iteration=round(statistics.median(cpu2[1:] or cpu2) / positions * 1e6, 2)
                        if cpu2 else None,
                        reconstruct_peak_rss_MiB=round(rss2, 1),  # the largest rank's (wait4 on mpirun)
                        reads=reads)
            for key in ("plan_s_per_iteration", "plan_us_per_position_iteration", "plan_cpu_us_per_position_iteration",
                        "time_to_first_iteration_s", "reconstruct_wall_s"):
                row2.pop(key, None)
            rows.append(row2)
            print(f"{'':>11} 2 ranks: {row2['us_per_position_iteration']:.1f} µs/pos·it, loss histories within "
                  f"{diff:.2e} of 1 rank's; {'; '.join(reads)}", flush=True)
            # Float sums round by how the ranks cut a batch (the unguarded amplitude loss lets Adam
            # amplify it); the deterministic sums give one rank's bits on any number of ranks.
            same = {}
            for ranks in (1, 2):
                out = work / f"r{scan[0]}-det{ranks}.zip"
                argv3 = (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] if ranks == 2 else []) + argv + [
                    "--set", "reconstruct.deterministic=true", "--set", f"reconstruct.threads={3 - ranks}",
                    "-o", str(out), "--overwrite"]
                st, *_ = run(argv3, log=work / f"reconstruct{scan[0]}-det{ranks}.log")
                if st != 0:
                    sys.exit(f"deterministic {ranks} rank(s) {scan} failed: see {work}/reconstruct{scan[0]}-det{ranks}.log")
                z = zipfile.ZipFile(out)
                same[ranks] = (history(out)[0]["loss"], z.read("object.npy"), z.read("probe.npy"))
            identical = same[1] == same[2]
            rows.append(dict(scan_shape=list(scan), positions=positions, iterations=iterations, residency=row["residency"],
                             ranks=2, deterministic=True, loss=same[2][0], same_bits_as_1_rank=identical))
            print(f"{'':>11} deterministic sums: 2 ranks (1 thread each) {'the same bits as' if identical else 'DIFFER from'} "
                  f"1 rank (2 threads): loss history, object and probe", flush=True)
        # The big files go as soon as they are used (the logs stay with --keep).
        for big in work.glob(f"[pr]{scan[0]}*.zip"):
            big.unlink()
    base = rows[0]["cpu_us_per_position_iteration"]
    print(f"CPU µs per position·iteration against {sizes[0][0]}x{sizes[0][1]}: " +
          ", ".join(f"{r['scan_shape'][0]}x{r['scan_shape'][1]} "
                    f"{(r['cpu_us_per_position_iteration'] / base - 1) * 100:+.1f} %" for r in rows if not r.get("ranks")))
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(ROOT / "bench" / "results.jsonl", "a") as f:
        for r in rows:
            r = dict(r, loss=None)  # the loss history stays in the work folder's results
            f.write(json.dumps(dict({"date": date, "commit": commit, "benchmark": "scale",
                                     "machine": {"cpu": cpu_name, "cores": os.cpu_count()}, "engine": "cpu",
                                     "case": "simulate", "detector": [96, 96], "batch": 128,
                                     "threads": args.threads, "dose_e_per_A2": float(args.dose)}, **r)) + "\n")
    if not args.keep:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
