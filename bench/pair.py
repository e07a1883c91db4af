#!/usr/bin/env python3
"""Two fencepost builds side by side: the 4 KiB fenced write, interleaved sample by sample.

    bench/pair.py OLD_FENCEPOST NEW_FENCEPOST [--rounds N] [--spawntime PATH] [--work DIR]

Each round, in an order that alternates, each build gets a fresh root of its own: one
untimed `claim`, then one timed `write doc.md --epoch 1 --from 4k` run through
`spawntime` (no shell in between, see spawntime.c). Every sample of both builds meets the
disk and the machine's load at the same moments, so their ratio is the measure of a
change (the medians' ratio, and the spread of the ratio over blocks of rounds). Also
times `--version` the same way: the start-up alone. Prints one table; changes nothing
outside --work.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile


def spawn_ns(spawntime, argv, env):
    out = subprocess.run([spawntime, *argv], env=env, capture_output=True, text=True, check=True)
    ns, _faults, status = out.stdout.split()
    if status != "0":
        raise SystemExit(f"{argv} exited {status}")
    return int(ns)


def one_write(spawntime, fp, work, payload, env):
    root = tempfile.mkdtemp(dir=work)
    try:
        subprocess.run([fp, "-q", "--root", root, "init"], env=env, check=True)
        subprocess.run([fp, "-q", "--root", root, "claim", "doc.md", "-o", "w", "-t", "1h"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        return spawn_ns(spawntime, [fp, "-q", "--root", root, "write", "doc.md", "--epoch", "1",
                                    "--from", payload], env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summary(name, old, new, blocks):
    om, nm = statistics.median(old), statistics.median(new)
    size = max(1, len(old) // blocks)
    ratios = []
    for b in range(0, len(old) - size + 1, size):
        ratios.append(statistics.median(new[b:b + size]) / statistics.median(old[b:b + size]))
    return (f"| {name} | {len(old)} | {om / 1e6:.3f} | {nm / 1e6:.3f} | {nm / om:.3f} | "
            f"{min(ratios):.3f}-{max(ratios):.3f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--spawntime", default="target/bench/spawntime")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fencepost-pair-")
    os.makedirs(work, exist_ok=True)
    payload = os.path.join(work, "4k")
    with open(payload, "wb") as f:
        f.write(os.urandom(4096))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEPOST_")}
    builds = [a.old, a.new]
    writes = {b: [] for b in builds}
    starts = {b: [] for b in builds}
    for r in range(a.rounds):
        order = builds if r % 2 == 0 else builds[::-1]
        for b in order:
            writes[b].append(one_write(a.spawntime, b, work, payload, env))
        for b in order:
            starts[b].append(spawn_ns(a.spawntime, [b, "--version"], env))
    print("| measure | rounds | old ms (median) | new ms (median) | new/old | new/old per block |")
    print("|---|--:|--:|--:|--:|--:|")
    print(summary("`--version`", starts[a.old], starts[a.new], a.blocks))
    print(summary("4 KiB fenced write (`--from`)", writes[a.old], writes[a.new], a.blocks))
    try:
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    except OSError:
        pass
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
