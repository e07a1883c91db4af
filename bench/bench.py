#!/usr/bin/env python3
"""fencepost benchmarks. Run through bench/run.sh, which builds and installs
what this needs; this script runs every comparison side by side and writes the table.

Ratios, not absolute times, are the result: the machines are shared and noisy. Every
timed comparison runs in ROUNDS rounds; each round runs all its commands back to back
(the order reversed every other round, so a drift in load hits both sides alike), and the
round's ratio is median(A) / median(B). The table gives the median of the round ratios
and their min-max spread. Rows 1, 1c and 2 compare single processes of a few ms: they are
spawned directly (bench/spawntime.c), sample by sample in turn, rather than through
hyperfine's shell (see `spawned`). Rows measured otherwise (memory, lock hold, latency
under load) say what their spread is taken over. Rows 9 publish a folder (`write --tree`)
against rsync into a new folder and a symlink swap.
"""

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import random
import sys
import threading
import time
from pathlib import Path

FULL = dict(
    rounds=5, runs=20, warmup=3,  # rows 1-3 and 6: per round, per command
    start_runs=100,  # row 7
    fsync_writes=100,  # row 1b
    big=1 << 30, big_rounds=3, big_runs=2, rss_samples=3,  # row 4
    workers=8, writes=200, cont_rounds=2, hold_writes=50,  # row 5
    mid=64 << 20, pace_s=2.0, idle_writes=30, paced_reps=2, unpaced_reps=5,  # row 5 lock
    resources=1_000_000, log_events=1_000_000,  # row 6
    api_rounds=5, api_samples=200, api_warmup=10,  # rows 8a-8b: per side, per round
    tree_files=1000, tree_runs=10, tree_warmup=2,  # row 9a: 4 KiB files, per round, per side
    big_tree=True, big_tree_rounds=5, big_tree_runs=3,  # row 9b: 10 files of 100 MiB
)
SMOKE = dict(
    rounds=1, runs=3, warmup=1,
    start_runs=5,
    fsync_writes=10,
    big=4 << 20, big_rounds=1, big_runs=1, rss_samples=1,
    workers=8, writes=3, cont_rounds=1, hold_writes=2,
    mid=4 << 20, pace_s=0.3, idle_writes=3, paced_reps=1, unpaced_reps=1,
    resources=10_000, log_events=10_000,
    api_rounds=1, api_samples=5, api_warmup=1,
    tree_files=20, tree_runs=2, tree_warmup=1,
    big_tree=False, big_tree_rounds=1, big_tree_runs=1,
)

MIB = 1 << 20


def q(path):
    return shlex.quote(str(path))


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.2f} ms"


def fmt_size(n):
    if n >= 1 << 30 and n % (1 << 30) == 0:
        return f"{n >> 30} GiB"
    if n >= MIB and n % MIB == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def pct(p, values):
    values = sorted(values)
    if not values:
        return None
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


class Bench:
    def __init__(self, args):
        self.smoke = args.smoke
        self.cfg = SMOKE if args.smoke else FULL
        self.fp = Path(args.fp).resolve()
        # The default, dynamically linked build: row 1c, and the rows that time SQLite's
        # lock with the LD_PRELOAD shim, which a static binary does not load.
        self.fp_dynamic = Path(args.fp_dynamic).resolve()
        self.floor = Path(args.floor).resolve()
        self.spawntime = Path(args.spawntime).resolve()
        self.link_order = args.link_order
        self.shim = Path(args.shim).resolve()
        # The API's bench program (examples/bench_api.rs), rows 8a-8b.
        self.api_bin = Path(args.api).resolve() if args.api else None
        self.work = Path(args.work).resolve()
        self.out = Path(args.out)
        self.here = Path(__file__).resolve().parent
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, FP=str(self.fp), LC_ALL="C")
        for k in list(self.env):
            if k.startswith("FENCEPOST_"):
                del self.env[k]
        self.rows = []  # the table
        self.details = []  # markdown sections after the table
        self.seq = 0
        self.in4k = self.work / "in4k"
        self.in4k.write_bytes(os.urandom(4096))

    # ---------------------------------------------------------------- tools

    def log(self, msg):
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def sh(self, cmd, cwd=None, env=None, check=True, capture=True):
        res = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env or self.env,
                             stdout=subprocess.PIPE if capture else None,
                             stderr=subprocess.PIPE if capture else None, text=True)
        if check and res.returncode != 0:
            raise SystemExit(f"bench: command failed ({res.returncode}): {cmd}\n"
                             f"{res.stdout or ''}{res.stderr or ''}")
        return res

    def fpc(self, root, *args, env=None, check=True):
        return self.sh([str(self.fp), "--root", str(root), *map(str, args)], env=env, check=check)

    def claim(self, root, doc, owner="bench", env=None):
        return int(self.fpc(root, "claim", doc, "--owner", owner, "--ttl", "1ms", env=env).stdout)

    def hyperfine(self, tag, cmds, runs, warmup, rounds, cwd, prepares=None, shell=True, env=None,
                  failing=False):
        """cmds: [(name, command)]. Returns ({name: [round medians]}, {name: [all times]}).
        failing: some command is expected to exit non-zero (its time still counts)."""
        medians = {n: [] for n, _ in cmds}
        times = {n: [] for n, _ in cmds}
        for r in range(rounds):
            order = list(range(len(cmds)))
            if r % 2:
                order.reverse()
            self.seq += 1
            jf = self.logs / f"{self.seq:02d}-{tag}-r{r}.json"
            argv = ["hyperfine", "--style", "basic", "--runs", str(runs), "--warmup", str(warmup),
                    "--export-json", str(jf)]
            if not shell:
                argv.append("-N")
            if failing:
                argv.append("--ignore-failure")
            if prepares:
                for i in order:
                    argv += ["--prepare", prepares[i]]
            for i in order:
                argv += ["-n", cmds[i][0], cmds[i][1]]
            self.log(f"hyperfine {tag} round {r + 1}/{rounds}")
            with open(self.logs / f"{self.seq:02d}-{tag}-r{r}.txt", "w") as out:
                res = subprocess.run(argv, cwd=cwd, env=env or self.env, stdout=out,
                                     stderr=subprocess.STDOUT)
            if res.returncode != 0:
                raise SystemExit(f"bench: hyperfine {tag} failed; see "
                                 f"{self.logs}/{self.seq:02d}-{tag}-r{r}.txt:\n"
                                 + (self.logs / f"{self.seq:02d}-{tag}-r{r}.txt").read_text()[-3000:])
            for result in json.loads(jf.read_text())["results"]:
                medians[result["command"]].append(result["median"])
                times[result["command"]] += result["times"]
        return medians, times

    def spawned(self, tag, cmds, runs, warmup, rounds, cwd, prepare):
        """Like `hyperfine`, but each sample is one command spawned directly by
        bench/spawntime.c, with no shell around it, and the commands take turns sample by
        sample (in a shuffled order) rather than run by run. cmds: [(name, argv)]; an
        argument "{epoch}" becomes the epoch that `prepare` (a shell command, untimed, run
        before every sample) wrote to the file `ep`. Returns ({name: [round medians]},
        {name: [all times]})."""
        medians = {n: [] for n, _ in cmds}
        times = {n: [] for n, _ in cmds}
        shuffle = random.Random(tag).shuffle
        for r in range(rounds):
            self.seq += 1
            self.log(f"spawned {tag} round {r + 1}/{rounds}")
            samples = {n: [] for n, _ in cmds}
            for i in range(warmup + runs):
                order = list(cmds)
                shuffle(order)
                for name, argv in order:
                    self.sh(prepare, cwd=cwd)
                    epoch = (Path(cwd) / "ep").read_text().strip()
                    argv = [epoch if a == "{epoch}" else str(a) for a in argv]
                    out = self.sh([str(self.spawntime), *argv], cwd=cwd).stdout.split()
                    if len(out) != 3 or out[2] != "0":
                        raise SystemExit(f"bench: {tag}: {name} failed ({out}): {argv}")
                    if i >= warmup:
                        samples[name].append(int(out[0]) / 1e9)
            with open(self.logs / f"{self.seq:02d}-{tag}-r{r}.json", "w") as f:
                json.dump(samples, f)
            for name, ts in samples.items():
                medians[name].append(statistics.median(ts))
                times[name] += ts
        return medians, times

    def ratio_row(self, num, title, medians, a, b, goal, limit=None, strict=False, note="",
                  fmt=fmt_time, verdict=None):
        ra, rb = medians[a], medians[b]
        ratios = [x / y for x, y in zip(ra, rb)]
        self.add_row(num, title, statistics.median(ra), statistics.median(rb), ratios, goal,
                     limit, strict, note, fmt, verdict)

    def add_row(self, num, title, a, b, ratios, goal, limit=None, strict=False, note="",
                fmt=fmt_time, verdict=None):
        med = statistics.median(ratios)
        if verdict is None:
            if limit is None:
                verdict = "reported"
            elif (med < limit) if strict else (med <= limit):
                verdict = "met"
            else:
                verdict = f"**missed** by {(med / limit - 1) * 100:.0f}%"
        if note:
            verdict += f"; {note}"
        self.rows.append(dict(num=num, title=title, a=fmt(a) if a is not None else "-",
                              b=fmt(b) if b is not None else "-", ratio=med, lo=min(ratios),
                              hi=max(ratios), n=len(ratios), goal=goal, verdict=verdict))

    # ------------------------------------------------------------- rows 1-3

    def publish_small(self):
        c = self.cfg
        root = self.work / "small"
        root.mkdir()
        shutil.copy(self.in4k, root / "in4k")
        self.claim(root, "doc.md")  # creates the state file
        fp = q(self.fp)
        prep = f"{fp} claim doc.md --owner bench --ttl 1ms > ep"
        write = ["-q", "write", "doc.md", "--epoch", "{epoch}", "--from", "in4k"]
        today = ("cat in4k > .today.md.tmp && sync .today.md.tmp && mv .today.md.tmp today.md"
                 " && sync .")
        cmds = [
            ("fencepost-write", [self.fp, *write]),
            ("dynamic-write", [self.fp_dynamic, *write]),
            ("floor", [self.floor, "floor.md", "in4k"]),
            ("flock-shell", ["flock", ".today.lock", "sh", "-c", today]),
        ]
        med, _ = self.spawned("publish-4k", cmds, c["runs"], c["warmup"], c["rounds"], root,
                              prep)
        self.ratio_row("1", "Floor: `fencepost write` 4 KiB (fenced, durable) vs minimal C "
                       "durable atomic replace (`bench/floor.c`)", med, "fencepost-write",
                       "floor", "<= 2.0x (1.5x long-term)", 2.0)
        self.ratio_row("2", "Today: `fencepost write` 4 KiB vs `flock(1)` + `sh -c 'cat > tmp"
                       " && sync tmp && mv tmp doc && sync .'`", med, "fencepost-write",
                       "flock-shell", "< 1 (faster)", 1.0, strict=True)
        self.ratio_row("1c", "Build: the same write with the default, dynamically linked "
                       "build vs the static one measured everywhere else", med, "dynamic-write",
                       "fencepost-write", "report")
        # Row 1 as hyperfine times it through `sh -c` (reading the epoch in the shell),
        # less the shell start-up it measures on its own: kept to show how far that
        # method lands from the direct one (bench/notes.md).
        cmds = [
            ("fencepost-write", f'read e < ep; exec {fp} -q write doc.md --epoch "$e" --from in4k'),
            ("floor", f"exec {q(self.floor)} floor.md in4k"),
        ]
        med, _ = self.hyperfine("publish-4k-sh", cmds, c["runs"], c["warmup"], c["rounds"], root,
                                prepares=[prep] * len(cmds))
        self.ratio_row("1d", "Method: row 1 timed by hyperfine through `sh -c` (the epoch read "
                       "in the shell; hyperfine's measured shell start-up subtracted)", med,
                       "fencepost-write", "floor", "report")
        assert (root / "doc.md").read_bytes() == self.in4k.read_bytes()

        # claim cost
        cmds = [
            ("claim+release", f'e=$({fp} claim lk.md --owner bench --ttl 30s) && '
                              f'exec {fp} -q release lk.md --owner bench --epoch "$e"'),
            ("flock-n", "exec flock -n .lk.lock true"),
        ]
        med, _ = self.hyperfine("claim", cmds, c["runs"], c["warmup"], c["rounds"], root)
        self.ratio_row("3", "Claim: `fencepost claim` + `release` vs `flock -n lockfile true`",
                       med, "claim+release", "flock-n", "report")
        self.fsync_budget()

    def fsync_budget(self):
        """Row 1b: fsyncs per fenced write, counted (strace), over many writes in a row, so
        that the checkpoints that come every few dozen commits are included."""
        n = self.cfg["fsync_writes"]
        root = self.work / "fsyncs"
        root.mkdir()
        shutil.copy(self.in4k, root / "in4k")
        self.claim(root, "doc.md")
        fp = q(self.fp)
        script = (f"for i in $(seq 1 {n}); do e=$({fp} claim doc.md --owner bench --ttl 1ms) && "
                  f'{fp} -q write doc.md --epoch "$e" --from in4k || exit 1; done')
        trace = self.work / "fsyncs.txt"
        self.sh(["strace", "-f", "-qq", "-e", "trace=execve,clone,clone3,fsync,fdatasync",
                 "-o", str(trace),
                 "sh", "-c", script], cwd=root)
        # The command of each pid, from its execve; a thread (or a child before its
        # execve) runs its parent's, from the clone, whose return strace may print after
        # the child's first calls: hence two passes.
        calls = [(pid, call.strip()) for pid, _, call in
                 (line.partition(" ") for line in trace.read_text().splitlines())]
        command, parent = {}, {}
        for pid, call in calls:
            if call.startswith("execve("):
                command[pid] = next((w for w in ("claim", "write") if f'"{w}"' in call), "other")
            elif call.startswith(("clone", "<... clone")) and "<unfinished" not in call:
                parent[call.rpartition("= ")[2].strip()] = pid

        def command_of(pid):
            while pid not in command and pid in parent:
                pid = parent[pid]
            return command.get(pid, "other")

        counts = {"claim": 0, "write": 0, "other": 0}
        for pid, call in calls:
            if call.startswith(("fsync(", "fdatasync(")):
                counts[command_of(pid)] += 1
        per_write = (counts["write"] + counts["claim"] - n) / n
        self.fsyncs = dict(n=n, **counts)
        self.add_row("1b", f"fsyncs per fenced 4 KiB write, {n} writes in a row each after its "
                     "claim (`strace -f`; checkpoints included, wherever they land; each claim's "
                     "own COMMIT fsync not charged) vs the floor program's 2", per_write, 2,
                     [per_write / 2], "<= 3.5 fsyncs",
                     verdict="met" if per_write <= 3.5 else "**missed**",
                     note=f"per process: write {counts['write'] / n:.2f}, claim "
                          f"{counts['claim'] / n:.2f}", fmt=lambda x: f"{x:.2f}")

    # --------------------------------------------------------------- row 4

    def big_documents(self):
        c = self.cfg
        root = self.work / "big"
        root.mkdir()
        src = root / "big.src"
        block = os.urandom(MIB)
        with open(src, "wb") as f:
            for _ in range(c["big"] // MIB):
                f.write(block)
        self.sh(["sync", str(src)])
        self.claim(root, "big.md")
        fp = q(self.fp)
        size = fmt_size(c["big"])
        prep = f"{fp} claim big.md --owner bench --ttl 1ms > ep"
        cmds = [
            ("stdin", f'read e < ep; cat big.src | {fp} -q write big.md --epoch "$e"'),
            ("from", f'read e < ep; exec {fp} -q write big.md --epoch "$e" --from big.src'),
            ("floor", f"exec {q(self.floor)} floor.md big.src"),
            ("cp+sync", "cp big.src big.cp && exec sync big.cp"),
        ]
        # One warm-up run each: the first write into never-used page cache is much slower
        # on this VM (first touch of guest memory), whichever command comes first.
        med, _ = self.hyperfine("big", cmds, c["big_runs"], 1, c["big_rounds"], root,
                                prepares=[prep] * len(cmds))
        self.ratio_row("4a", f"Big: {size} streamed from stdin (`cat src \\| fencepost write`) vs"
                       " `cp src dst && sync dst`", med, "stdin", "cp+sync", "<= 1.25x", 1.25)
        self.ratio_row("4b", f"Big: {size} with `--from` vs `cp src dst && sync dst`", med,
                       "from", "cp+sync", "<= 1.5x (1.25x long-term)", 1.5)
        self.ratio_row("4c", f"Big: {size} with `--from` vs the floor program on {size} (temp, "
                       "fsync, rename, folder fsync; no hash, no fence)", med, "from", "floor",
                       "report")

        # peak resident memory, /usr/bin/time -v
        def rss(cmd):
            tf = self.work / "time.txt"
            self.sh(cmd.replace("TIME", f"/usr/bin/time -v -o {q(tf)}"), cwd=root)
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tf.read_text())
            return int(m.group(1)) * 1024

        samples = {"stdin": [], "from": [], "cp": []}
        for _ in range(c["rss_samples"]):
            for name, cmd in [
                ("stdin", f"e=$({fp} claim big.md --owner bench --ttl 1ms) && cat big.src | TIME "
                          f'{fp} -q write big.md --epoch "$e"'),
                ("from", f"e=$({fp} claim big.md --owner bench --ttl 1ms) && TIME "
                         f'{fp} -q write big.md --epoch "$e" --from big.src'),
                ("cp", "TIME cp big.src big.cp"),
            ]:
                samples[name].append(rss(cmd))
        self.rss = samples
        mib = lambda n: f"{n / MIB:.1f} MiB"  # noqa: E731
        for num, name, how in [("4d", "stdin", "stdin"), ("4e", "from", "`--from`")]:
            peak = max(samples[name])
            ratios = [x / y for x, y in zip(samples[name], samples["cp"])]
            self.add_row(num, f"Peak RSS (`/usr/bin/time -v`), {size} via {how} vs `cp`",
                         peak, statistics.median(samples["cp"]), ratios, "< 16 MiB",
                         verdict="met" if peak < 16 * MIB else
                         f"**missed** by {(peak / (16 * MIB) - 1) * 100:.0f}%",
                         note=f"max of {len(samples[name])}", fmt=mib)
        (root / "big.cp").unlink(missing_ok=True)
        (root / "floor.md").unlink(missing_ok=True)
        (root / "big.md").unlink(missing_ok=True)
        src.unlink()

    # --------------------------------------------------------------- row 5

    def contention(self):
        c = self.cfg
        W, N = c["workers"], c["writes"]
        contend = self.here / "lib" / "contend.sh"
        cmds, outs = [], {}
        for mode in ("fence", "flock"):
            for share in ("distinct", "one"):
                name = f"{mode}-{share}"
                root = self.work / f"cont-{name}"
                root.mkdir()
                outs[name] = self.work / f"cont-{name}.out"
                cmds.append((name, f"exec sh {q(contend)} {mode} {share} {W} {N} {q(root)} "
                                   f"{q(self.in4k)} {q(outs[name])}"))
        med, _ = self.hyperfine("contention", cmds, 1, 0, c["cont_rounds"], self.work)
        tally = {}
        for name, path in outs.items():
            t = dict(ok=0, busy=0, other=0, codes=[])
            for line in path.read_text().splitlines():
                fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                for k in ("ok", "busy", "other"):
                    t[k] += int(fields.get(k, 0))
                t["codes"] += line.split("codes=", 1)[1].split()
            tally[name] = t
        self.tally = tally
        total = W * N
        for num, share, what in [("5a", "distinct", f"{W} distinct documents"),
                                 ("5b", "one", "one document, claiming in turn (`claim --wait`)")]:
            f, t = tally[f"fence-{share}"], tally[f"flock-{share}"]
            calls = f["ok"] * 3 + f["other"]
            thr = total / statistics.median(med[f"fence-{share}"])
            note = (f"{thr:.0f} writes/s; busy (exit 7): {f['busy']} of ~{calls} fencepost calls"
                    f"; other failures: {f['other']}")
            if f["codes"]:
                note += f" ({' '.join(sorted(set(f['codes'])))})"
            if t["busy"] or t["other"]:
                note += f"; flock side failures: {t['busy'] + t['other']}"
            self.ratio_row(num, f"Contention: {W} processes x {N} fenced publishes (claim, write,"
                           f" release) to {what} vs the same with `flock(1)` + shell",
                           med, f"fence-{share}", f"flock-{share}", "busy = 0",
                           verdict="met" if f["busy"] == 0 else "**missed**", note=note)
        self.cont_medians = med

        # Lock hold under contention: an untimed pass with the LD_PRELOAD shim.
        holds = {}
        for share in ("distinct", "one"):
            root = self.work / f"hold-{share}"
            root.mkdir()
            logf = self.work / f"hold-{share}.log"
            env = dict(self.env, LD_PRELOAD=str(self.shim), LOCKHOLD_LOG=str(logf),
                       FP=str(self.fp_dynamic))
            t0 = time.monotonic()
            self.sh(["sh", str(contend), "fence", share, str(W), str(c["hold_writes"]), str(root),
                     str(self.in4k), str(self.work / f"hold-{share}.out")], env=env)
            wall = time.monotonic() - t0
            holds[share] = (self.parse_holds(logf), wall)
        self.cont_holds = holds

    @staticmethod
    def parse_holds(path):
        """{command: [hold seconds]}: each process's last W..U pair (its transaction)."""
        events = {}
        for line in Path(path).read_text().splitlines():
            pid, cmd, kind, ns = line.split()
            events.setdefault((pid, cmd), []).append((kind, int(ns)))
        out = {}
        for (pid, cmd), evs in events.items():
            pairs, start = [], None
            for kind, ns in evs:
                if kind == "W":
                    start = ns
                elif kind == "U" and start is not None:
                    pairs.append((start, ns))
                    start = None
            if pairs:
                out.setdefault(cmd, []).append(dict(pid=int(pid), w=pairs[-1][0], u=pairs[-1][1],
                                                    hold=(pairs[-1][1] - pairs[-1][0]) / 1e9))
        return out

    def lock_scope(self):
        """A 64 MiB write to doc A must not block writers of doc B while it stages."""
        c = self.cfg
        root = self.work / "lock"
        root.mkdir()
        mid = self.work / "mid.src"
        block = os.urandom(MIB)
        with open(mid, "wb") as f:
            for _ in range(c["mid"] // MIB):
                f.write(block)
        self.sh(["sync", str(mid)])
        logf = self.work / "lock.log"
        env = dict(self.env, LD_PRELOAD=str(self.shim), LOCKHOLD_LOG=str(logf))
        self.claim(root, "b.md")

        def b_write():
            e = self.claim(root, "b.md")
            t0 = time.monotonic_ns()
            self.sh([str(self.fp_dynamic), "--root", str(root), "-q", "write", "b.md", "--epoch",
                     str(e),
                     "--from", str(self.in4k)], env=env)
            return t0, time.monotonic_ns()

        idle = [b_write() for _ in range(c["idle_writes"])]
        idle_lat = [(u - t) / 1e9 for t, u in idle]

        def run_a(paced):
            """Starts A, runs B writes until A is done; returns A's record and B's latencies."""
            e = self.claim(root, "a.md")
            argv = [str(self.fp_dynamic), "--root", str(root), "-q", "write", "a.md", "--epoch",
                    str(e)]
            if not paced:
                argv += ["--from", str(mid)]
            t0 = time.monotonic_ns()
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE if paced else None)
            feeder = None
            if paced:
                def feed():
                    chunks = c["mid"] // MIB
                    for i in range(chunks):
                        proc.stdin.write(block)
                        proc.stdin.flush()
                        time.sleep(c["pace_s"] / chunks)
                    proc.stdin.close()
                feeder = threading.Thread(target=feed)
                feeder.start()
            bs = []
            while proc.poll() is None:
                bs.append(b_write())
            if feeder:
                feeder.join()
            if proc.wait() != 0:
                raise SystemExit(f"bench: the 64 MiB write failed ({proc.returncode}): {argv}")
            return dict(pid=proc.pid, t0=t0, t1=time.monotonic_ns(), bs=bs)

        runs = [("paced", run_a(True)) for _ in range(c["paced_reps"])]
        runs += [("unpaced", run_a(False)) for _ in range(c["unpaced_reps"])]
        holds = self.parse_holds(logf)
        by_pid = {h["pid"]: h for h in holds.get("write", [])}
        small_holds = [h["hold"] for h in holds.get("write", [])
                       if h["pid"] not in {r["pid"] for _, r in runs}]
        results = {}
        for kind, r in runs:
            h = by_pid[r["pid"]]
            staging = (h["w"] - r["t0"]) / 1e9  # start of A to its lock acquisition
            during = [(u - t) / 1e9 for t, u in r["bs"] if t >= r["t0"] and u <= h["w"]]
            res = results.setdefault(kind, dict(holds=[], staging=[], during=[], total=[]))
            res["holds"].append(h["hold"])
            res["staging"].append(staging)
            res["total"].append((r["t1"] - r["t0"]) / 1e9)
            res["during"] += during
        self.lock_results = dict(idle=idle_lat, small_holds=small_holds, runs=results)
        size = fmt_size(c["mid"])
        idle_med = statistics.median(idle_lat)
        small_med = statistics.median(small_holds)
        all_big = [x for r in results.values() for x in r["holds"]]
        staging_min = min(x for r in results.values() for x in r["staging"])
        self.add_row("5c", f"Lock hold per write (`BEGIN IMMEDIATE` to COMMIT, LD_PRELOAD shim):"
                     f" {size} document vs 4 KiB", statistics.median(all_big), small_med,
                     [x / small_med for x in all_big],
                     f"hold independent of size", limit=2.0,
                     note=f"{size} staged in {fmt_time(staging_min)} or more with no lock held")
        for num, kind, what in [("5d", "paced", f"{size} fed over {c['pace_s']:g} s"),
                                ("5e", "unpaced", f"{size} from `--from` at disk speed")]:
            r = results.get(kind)
            if not r or not r["during"]:
                self.add_row(num, f"4 KiB write to doc B while doc A takes {what}", None, idle_med,
                             [float("nan")], "not blocked", verdict="no overlapping B write")
                continue
            during = r["during"]
            worst, staging = max(during), min(r["staging"])
            self.add_row(num, f"4 KiB write to doc B while doc A stages {what} vs idle",
                         statistics.median(during), idle_med, [x / idle_med for x in during],
                         "B never waits for A's bytes" if kind == "paced" else "report",
                         verdict=("met" if worst < staging / 2 else "**missed**")
                         if kind == "paced" else "reported (shares the disk with A)",
                         note=f"{len(during)} B writes, slowest {fmt_time(worst)} while A staged "
                              f"for {fmt_time(staging)}")

    # --------------------------------------------------------------- row 6

    def scale(self):
        c = self.cfg
        roots = {}
        keep = str(c["log_events"] * 10)
        env = dict(self.env, FENCEPOST_LOG_KEEP=keep)
        for name, n in (("empty", 0), ("large", c["resources"])):
            root = self.work / f"scale-{name}"
            root.mkdir()
            shutil.copy(self.in4k, root / "in4k")
            self.claim(root, "seed.md", env=env)
            if n:
                t0 = time.monotonic()
                self.populate(root / ".fencepost" / "state.db", n, c["log_events"])
                self.log(f"populated {n} resources in {time.monotonic() - t0:.1f} s")
            roots[name] = root
        target = f"d/{c['resources'] // 2:07d}.md"
        wtarget = f"d/{c['resources'] // 2 + 1:07d}.md"
        fp = q(self.fp)
        cmds, preps = [], []
        for name, root in roots.items():
            cmds.append((f"claim-{name}", f"exec {fp} --root {q(root)} claim {target} --owner bench"
                                          f" --ttl 1ms"))
            preps.append("true")
            cmds.append((f"write-{name}", f'read e < {q(root)}/ep; exec {fp} --root {q(root)} -q '
                                          f'write {wtarget} --epoch "$e" --from {q(root)}/in4k'))
            preps.append(f"{fp} --root {q(root)} claim {wtarget} --owner bench --ttl 1ms > "
                         f"{q(root)}/ep")
        med, _ = self.hyperfine("scale", cmds, c["runs"], c["warmup"], c["rounds"], self.work,
                                prepares=preps, env=env)
        n = f"{c['resources']:,}"
        sz = (roots["large"] / ".fencepost" / "state.db").stat().st_size
        self.ratio_row("6a", f"Scale: `claim` on a state file with {n} resources and "
                       f"{c['log_events']:,} log events ({sz / MIB:.0f} MiB) vs an empty one",
                       med, "claim-large", "claim-empty", "<= 1.2x", 1.2)
        self.ratio_row("6b", f"Scale: `write` 4 KiB on the {n}-resource state file vs an empty one",
                       med, "write-large", "write-empty", "<= 1.2x", 1.2)

        # One-off: a log above the retention cap is pruned in one transaction.
        logf = self.work / "prune.log"
        penv = dict(self.env, LD_PRELOAD=str(self.shim), LOCKHOLD_LOG=str(logf),
                    FENCEPOST_LOG_KEEP=str(max(1, c["log_events"] // 10)))
        db = roots["large"] / ".fencepost" / "state.db"
        con = sqlite3.connect(db)
        top = con.execute("SELECT max(id) FROM log").fetchone()[0]
        # The claim below takes the next event id; the write's event id after it lands on
        # a multiple of 1000, which triggers the prune.
        pad = (1000 - (top + 2) % 1000) % 1000
        con.executemany("INSERT INTO log (at, resource, event, pid, host) VALUES (0, 'x', 'claim',"
                        " 0, 'bench')", [()] * pad)
        con.commit()
        con.close()
        e = self.claim(roots["large"], wtarget, env=env)
        t0 = time.monotonic()
        self.sh([str(self.fp_dynamic), "--root", str(roots["large"]), "-q", "write", wtarget,
                 "--epoch", str(e), "--from", str(self.in4k)], env=penv)
        took = time.monotonic() - t0
        hold = self.parse_holds(logf)["write"][-1]["hold"]
        self.prune = dict(took=took, hold=hold, keep=int(penv["FENCEPOST_LOG_KEEP"]),
                          events=c["log_events"])

    def populate(self, db, n, events):
        """Bulk-loads the state file fencepost created (its schema, application_id and
        user_version are left as fencepost set them) with n resources and a log."""
        con = sqlite3.connect(db, isolation_level=None)
        app, ver = con.execute("SELECT application_id, user_version FROM pragma_application_id,"
                               " pragma_user_version").fetchone()
        con.execute("PRAGMA journal_mode=DELETE")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("BEGIN")
        now = int(time.time() * 1000)
        name = lambda i: f"d/{i:07d}.md"  # noqa: E731
        con.executemany(
            "INSERT INTO lease (resource, owner, epoch, deadline, state, result, updated_at)"
            " VALUES (?, ?, ?, ?, 'released', NULL, ?)",
            ((name(i), f"worker-{i % 64}", 1 + i % 7, now - 1000, now) for i in range(n)))
        con.executemany(
            "INSERT INTO sink (resource, fence, content_epoch, sha256, size, written_at, dev,"
            " ino, owner) VALUES (?, ?, ?, ?, 4096, ?, 2049, ?, ?)",
            ((name(i), 1 + i % 7, 1 + i % 7, f"{i * 2654435761:064x}"[-64:], now, 1000 + i,
              f"worker-{i % 64}") for i in range(n)))
        kinds = ("claim", "write", "release", "takeover", "stale")
        con.executemany(
            "INSERT INTO log (at, resource, event, owner, epoch, prev_owner, prev_epoch, sha256,"
            " pid, host, detail) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?, 'bench-host', ?)",
            ((now - events + j, name((j * 7919) % n), kinds[j % 5], f"worker-{j % 64}", 1 + j % 7,
              f"{j:064x}" if j % 5 == 1 else None, 10000 + j % 30000,
              f"deadline {now + j}" if j % 5 == 0 else None) for j in range(events)))
        con.execute("COMMIT")
        mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        app2, ver2 = con.execute("SELECT application_id, user_version FROM pragma_application_id,"
                                 " pragma_user_version").fetchone()
        con.close()
        if mode != "wal" or (app, ver) != (app2, ver2) or app == 0:
            raise SystemExit(f"bench: populated state file lost its identity ({mode}, {app2}, {ver2})")

    # --------------------------------------------------------------- row 7

    def startup(self):
        c = self.cfg
        empty = self.work / "empty-root"
        empty.mkdir()
        cmds = [("version", f"{self.fp} --version"),
                ("status", f"{self.fp} --root {empty} status"),
                ("true", "true")]
        # `status` on a root without a state file says so and exits 2.
        med, _ = self.hyperfine("startup", cmds, c["start_runs"], 10, c["rounds"], self.work,
                                shell=False, failing=True)
        self.ratio_row("7a", "Start-up: `fencepost --version` vs `true`", med, "version", "true",
                       "report")
        self.ratio_row("7b", "Start-up: `fencepost status` on an empty root vs `true`", med,
                       "status", "true", "report")
        if (empty / ".fencepost").exists():
            raise SystemExit("bench: status created a state file in an empty root")

    # --------------------------------------------------------------- row 8

    def api_program(self, tag, place):
        """Runs examples/bench_api.rs in mode `tag` on `place`; returns its rounds (one
        JSON object each: the samples of A and B, in seconds, and A's parts)."""
        c = self.cfg
        self.log(f"bench_api {tag}: {c['api_rounds']} rounds of {c['api_samples']} samples")
        res = self.sh([str(self.api_bin), tag, str(place), "--rounds", str(c["api_rounds"]),
                       "--samples", str(c["api_samples"]), "--warmup", str(c["api_warmup"])])
        self.seq += 1
        (self.logs / f"{self.seq:02d}-api-{tag}.json").write_text(res.stdout)
        return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]

    def api(self):
        """Rows 8a-8b: the Rust API in a long-lived program, each against the least the
        same durable work takes in that program, A and B taking turns sample by sample."""
        t8a = ("API: 4 KiB fenced write through a `fencepost::Client` kept open (state file "
               "open; each write after its own untimed claim, a new epoch) vs an in-process "
               "durable replace in the same folder (temp file, write, fsync, rename, folder "
               "fsync)")
        t8b = ("API on a PostgreSQL store: claim + 4 KiB write + complete through one "
               "`Client` vs one `postgres::Client` making three committed transactions of "
               "its own (UPDATE, INSERT of 4 KiB bytea, UPDATE; prepared once) in the same "
               "database")
        if self.api_bin is None:
            for num, title, goal in (("8a", t8a, "<= 1.6x"), ("8b", t8b, "<= 1.5x")):
                self.add_row(num, title, None, None, [float("nan")], goal,
                             verdict="skipped (no `--api` program)")
            return
        per = lambda rounds, key: statistics.median(  # noqa: E731
            statistics.median(r[key]) for r in rounds)

        def medians(rounds):
            return {k: [statistics.median(r[k]) for r in rounds] for k in ("a", "b")}

        root = self.work / "api"
        root.mkdir()
        rounds = self.api_program("local", root)
        self.ratio_row("8a", t8a, medians(rounds), "a", "b", "<= 1.6x", 1.6,
                       note=f"claim before each write (untimed) {fmt_time(per(rounds, 'claim'))}")

        # Row 8b on a throwaway cluster of its own, on the bench folder's disk, with
        # PostgreSQL's default durability (tools/pg-test-cluster.sh).
        cluster = self.work / "api-pg"
        tool = self.here.parent / "tools" / "pg-test-cluster.sh"
        os.chmod(self.work, self.work.stat().st_mode | 0o111)  # the server's user reaches it
        started = self.sh(["bash", str(tool), "start", str(cluster)], check=False)
        if started.returncode != 0:
            why = (started.stderr.strip().splitlines() or ["?"])[-1]
            self.add_row("8b", t8b, None, None, [float("nan")], "<= 1.5x",
                         verdict=f"skipped (no PostgreSQL cluster: {why})")
            return
        try:
            url = next(shlex.split(line)[1].partition("=")[2]
                       for line in started.stdout.splitlines()
                       if line.startswith("export FENCEPOST_TEST_STORE="))
            rounds = self.api_program("store", url)
        finally:
            self.sh(["bash", str(tool), "stop", str(cluster)], check=False)
        parts = ", ".join(f"{what} {fmt_time(per(rounds, k))} / {fmt_time(per(rounds, 'b_' + k))}"
                          for what, k in (("claim", "claim"), ("write", "write"),
                                          ("complete", "complete")))
        self.ratio_row("8b", t8b, medians(rounds), "a", "b", "<= 1.5x", 1.5,
                       note=f"per call (API / its transaction): {parts}")

    # --------------------------------------------------------------- row 9

    def make_tree(self, path, files, size, per_folder):
        """A source tree of `files` files of `size` random bytes each, `per_folder` to a
        folder (d000, d001, ...), or all in the top folder when per_folder is None;
        synced, so its own writeback lands in no timed run."""
        path.mkdir()
        block = os.urandom(min(size, MIB))
        for i in range(files):
            folder = path if per_folder is None else path / f"d{i // per_folder:03d}"
            folder.mkdir(exist_ok=True)
            with open(folder / f"f{i:05d}.bin", "wb") as f:
                if size <= MIB:
                    f.write(os.urandom(size))
                    continue
                f.write(os.urandom(64))  # no two files alike
                left = size - 64
                while left:
                    n = min(left, len(block))
                    f.write(block[:n])
                    left -= n
        self.sh(["sync"])

    def trees(self):
        """Rows 9a-9d: a folder published whole. A is the fenced publish, `fencepost write
        site --epoch E --tree SRC` after an untimed claim (copy beside the resource, each
        staged file hashed, one `syncfs`, the swap under the lock, the parent fsynced,
        COMMIT). B is the usual unfenced publish: rsync into a new folder, `sync`,
        and a symlink swapped over `current`. The version each replaces is removed before
        the next run, untimed, on both sides: fencepost keeps it for `--keep-old` (60 s) for
        readers still walking it, and a deployment keeps its last release for a while too."""
        c = self.cfg
        fp = q(self.fp)
        folders = -(-c["tree_files"] // 100)
        sets = [("9a", "small", c["tree_files"], 4096, 100,
                 f"{c['tree_files']:,} files of 4 KiB in {folders} folder"
                 + ("s" if folders > 1 else ""),
                 c["tree_runs"], c["tree_warmup"], c["rounds"])]
        if c["big_tree"]:
            sets.append(("9b", "big", 10, 100 * MIB, None, "10 files of 100 MiB",
                         c["big_tree_runs"], 1, c["big_tree_rounds"]))
        rsync = shutil.which("rsync")
        info = {}
        for num, tag, files, size, per_folder, what, runs, warmup, rounds in sets:
            base = self.work / f"tree-{tag}"
            base.mkdir()
            src, a, b = base / "src", base / "a", base / "b"
            self.make_tree(src, files, size, per_folder)
            a.mkdir()
            b.mkdir()
            self.claim(a, "site")
            title = (f"Tree: `fencepost write site --tree SRC`, {what} (fenced: copy and hash, "
                     "`syncfs`, swap under the lock) vs `rsync -a SRC/ NEW/ && sync && ln -s NEW "
                     "tmp && mv -T tmp current`")
            if rsync is None:
                self.add_row(num, title, None, None, [float("nan")], "<= 1.3x",
                             verdict="skipped (no rsync: bench/run.sh installs it)")
                continue
            # Before every sample, whichever side it is for: A's claim (its epoch to `ep`),
            # the version each side replaced last removed, B's next folder name, a sync.
            prep = (f"{fp} --root {q(a)} claim site --owner bench --ttl 1ms > ep && "
                    f"rm -rf {q(a)}/.site.fencepost-old-* && cd {q(b)} && "
                    "keep=$(readlink current || true) && for d in v.*; do "
                    '[ "$d" = "$keep" ] || rm -rf "$d"; done && '
                    "echo v.$(date +%s%N) > next && sync")
            # Both through `sh -c`, so that each pays one shell; the samples alternate
            # (spawned), since the disk's load moves within seconds here.
            cmds = [
                ("fencepost", ["sh", "-c", f'read e < ep; exec {fp} --root {q(a)} -q write site '
                                           f'--epoch "$e" --tree {q(src)}']),
                ("rsync", ["sh", "-c", f'cd {q(b)} && read new < next && rsync -a {q(src)}/ '
                                       '"$new"/ && sync && ln -s "$new" tmp && exec mv -T tmp '
                                       "current"]),
            ]
            med, _ = self.spawned(f"tree-{tag}", cmds, runs, warmup, rounds, base, prep)
            self.ratio_row(num, title, med, "fencepost", "rsync", "<= 1.3x", 1.3)
            for side in (a / "site", b / "current"):
                diff = self.sh(["diff", "-r", "-q", str(src), str(side)], check=False)
                if diff.returncode != 0:
                    raise SystemExit(f"bench: {side} is not a copy of {src}:\n{diff.stdout}")

            # Peak resident memory of each side's process (rsync's: the largest of its
            # processes, as wait4 reports it), /usr/bin/time -v, untimed runs.
            def rss(cmd):
                tf = self.work / "time.txt"
                self.sh(cmd.replace("TIME", f"/usr/bin/time -v -o {q(tf)}"), cwd=base)
                m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tf.read_text())
                return int(m.group(1)) * 1024

            samples = {"fencepost": [], "rsync": []}
            for _ in range(c["rss_samples"]):
                self.sh(prep, cwd=base)
                samples["fencepost"].append(rss(
                    f'read e < ep; TIME {fp} --root {q(a)} -q write site --epoch "$e" '
                    f"--tree {q(src)}"))
                samples["rsync"].append(rss(f'cd {q(b)} && read new < next && TIME rsync -a '
                                            f'{q(src)}/ "$new"/ && ln -s "$new" tmp && '
                                            "mv -T tmp current"))
            info[tag] = dict(what=what, rss=samples, runs=runs, warmup=warmup, rounds=rounds)
            self.sh(["rm", "-rf", str(base)])
        if not c["big_tree"]:
            self.add_row("9b", "Tree: 10 files of 100 MiB, as row 9a", None, None,
                         [float("nan")], "<= 1.3x", verdict="not run in the smoke run")
        mib = lambda n: f"{n / MIB:.1f} MiB"  # noqa: E731
        for num, tag in (("9c", "small"), ("9d", "big")):
            if tag not in info:
                continue
            s = info[tag]["rss"]
            peak = max(s["fencepost"])
            self.add_row(num, f"Peak RSS (`/usr/bin/time -v`) of the tree write, "
                         f"{info[tag]['what']}, vs `rsync -a` (its largest process)", peak,
                         statistics.median(s["rsync"]),
                         [x / y for x, y in zip(s["fencepost"], s["rsync"])],
                         "flat: < 16 MiB whatever the bytes",
                         verdict="met" if peak < 16 * MIB else
                         f"**missed** by {(peak / (16 * MIB) - 1) * 100:.0f}%",
                         note=f"max of {len(s['fencepost'])}", fmt=mib)
        self.tree_info = info

    # ------------------------------------------------------------ profiles

    def profiles(self):
        root = self.work / "profile"
        root.mkdir()
        fp = str(self.fp)
        out = []

        def strace(label, argv, cwd):
            f = self.work / "strace.txt"
            self.sh(["strace", "-f", "-y", "-T", "-o", str(f), "-e",
                     "trace=fsync,fdatasync,sync_file_range,syncfs,rename,renameat,renameat2,"
                     "unlink,unlinkat,linkat,openat,fcntl", *argv], cwd=cwd)
            fsyncs, counts = [], {}
            # A call that another thread's calls interrupt is split over two lines
            # ("PID fsync(5</path> <unfinished ...>", then "PID <... fsync resumed>) = 0
            # <0.0005>"): joined here, so the staging thread's calls count too.
            pending = {}
            for line in f.read_text().splitlines():
                pid, _, rest = line.partition(" ")
                rest = rest.strip()
                if rest.endswith("<unfinished ...>"):
                    pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
                    continue
                resumed = re.match(r"<\.\.\. \w+ resumed>(.*)$", rest)
                if resumed and pid in pending:
                    rest = pending.pop(pid) + resumed.group(1)
                m = re.search(r"(\w+)\((.*)\) += (-?\w+).*<([\d.]+)>$", rest)
                if not m:
                    continue
                call, args, _, secs = m.groups()
                counts[call] = counts.get(call, 0) + 1
                if call in ("fsync", "fdatasync"):
                    path = re.search(r"<([^>]*)>", args)
                    what = path.group(1) if path else args
                    what = what.replace(str(root), "ROOT")
                    fsyncs.append((what, float(secs)))
            return fsyncs, counts

        shutil.copy(self.in4k, root / "in4k")
        self.claim(root, "doc.md")
        e = self.claim(root, "doc.md")
        self.sh([fp, "-q", "write", "doc.md", "--epoch", str(e), "--from", "in4k"], cwd=root)
        e = self.claim(root, "doc.md")
        w_fsync, w_counts = strace("write", [fp, "-q", "write", "doc.md", "--epoch", str(e),
                                             "--from", "in4k"], root)
        f_fsync, f_counts = strace("floor", [str(self.floor), "floor.md", "in4k"], root)
        c_fsync, _ = strace("claim", [fp, "claim", "other.md", "--owner", "p", "--ttl", "1ms"], root)

        def table(rows):
            lines = ["| fsync of | time |", "|---|---|"]
            lines += [f"| `{w}` | {s * 1000:.2f} ms |" for w, s in rows]
            total = sum(s for _, s in rows)
            lines.append(f"| **{len(rows)} fsyncs** | **{total * 1000:.2f} ms** |")
            return "\n".join(lines)

        out.append("### Where a 4 KiB write's time goes\n")
        out.append("`strace -f -y -T` of one `fencepost write` (4 KiB, `--from`), of the floor "
                   "program, and of one `claim`, on the same folder. strace slows each traced call "
                   "a little; the fsync count, not the absolute time, is the point.\n")
        out.append("`fencepost write`:\n\n" + table(w_fsync) + "\n")
        out.append("Floor program:\n\n" + table(f_fsync) + "\n")
        out.append("`fencepost claim`:\n\n" + table(c_fsync) + "\n")
        calls = ", ".join(f"{k} {v}" for k, v in sorted(w_counts.items()))
        out.append(f"Traced calls in the write: {calls}.\n")

        # strace -c summary of the whole write
        f = self.work / "strace-c.txt"
        e = self.claim(root, "doc.md")
        self.sh(["strace", "-f", "-c", "-w", "-S", "time", "-o", str(f), fp, "-q", "write", "doc.md",
                 "--epoch", str(e), "--from", "in4k"], cwd=root)
        summary = f.read_text().strip().splitlines()
        out.append("`strace -c -w -f` of the same write (wall time per call, top 12):\n\n```\n"
                   + "\n".join(summary[:14] + summary[-2:]) + "\n```\n")

        # callgrind instruction counts: how much of a process is CPU work at all
        if shutil.which("valgrind") and shutil.which("callgrind_annotate"):
            empty = self.work / "cg-empty"
            empty.mkdir()
            e = self.claim(root, "doc.md")
            rows = []
            for label, argv in [("true", ["true"]), ("fencepost --version", [fp, "--version"]),
                                ("fencepost status (empty root)", [fp, "--root", str(empty),
                                                                   "status"]),
                                ("fencepost write 4 KiB", [fp, "-q", "write", "doc.md", "--epoch",
                                                           str(e), "--from", "in4k"])]:
                cg = self.work / "cg.out"
                # `status` on an empty root exits 2 (no state file); its count still stands.
                self.sh(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", *argv],
                        cwd=root, check=False)
                ann = self.sh(["callgrind_annotate", "--inclusive=yes", str(cg)]).stdout
                total = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", ann)

                def share(fn):
                    m = re.search(r"([\d,]+) \(\s*([\d.]+)%\)\s+\S*" + re.escape(fn), ann)
                    return f"{m.group(2)}%" if m else "-"
                rows.append(f"| {label} | {total.group(1) if total else '?'} | "
                            f"{share('_dl_relocate_object')} | {share('clap_builder::builder::command::Command::_do_parse')} |"
                            f" {share('sqlite3_prepare_v3')} | {share('sha2::sha256::compress256')} |")
            out.append("`valgrind --tool=callgrind` instruction counts (inclusive shares):\n\n"
                       "| Process | Instructions | ld.so relocation | clap parse | SQLite prepare "
                       "| SHA-256 |\n|---|--:|--:|--:|--:|--:|\n" + "\n".join(rows) + "\n")

        # perf stat on start-up, if perf works here
        res = shutil.which("perf") and subprocess.run(
            ["perf", "stat", "-r", "20", "-e", "task-clock,page-faults", fp, "--version"],
            capture_output=True, text=True, env=self.env)
        if res and res.returncode == 0 and "task-clock" in res.stderr:
            keep = [l.strip() for l in res.stderr.splitlines()
                    if "task-clock" in l or "page-faults" in l or "elapsed" in l]
            out.append("`perf stat -r 20 fencepost --version`:\n\n```\n" + "\n".join(keep)
                       + "\n```\n")
        self.details.append("\n".join(out))

    # ----------------------------------------------------------- report

    def machine(self):
        def cmd(argv):
            try:
                return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
            except OSError:
                return "?"
        cpu = "?"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = "?"
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
        fs = cmd(["findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--target", str(self.work)])
        rev = cmd(["git", "-C", str(self.here.parent), "rev-parse", "--short", "HEAD"])
        dirty = cmd(["git", "-C", str(self.here.parent), "status", "--porcelain", "--", "src",
                     "Cargo.toml", "Cargo.lock"])
        return dict(nproc=os.cpu_count(), cpu=cpu, kernel=platform.release(), mem=mem, fs=fs,
                    rev=rev + (" (+ uncommitted changes in src/)" if dirty else ""),
                    hyperfine=cmd(["hyperfine", "--version"]),
                    rustc=cmd(["rustc", "--version"]), os=platform.platform())

    def report(self, started, load0):
        m = self.machine()
        load1 = os.getloadavg()
        c = self.cfg
        L = []
        L.append("# fencepost benchmarks\n")
        if self.smoke:
            L.append("**Smoke run** (`bench/run.sh --smoke`): tiny sizes and few runs, to keep the "
                     "harness working. Its numbers mean nothing; see `bench/RESULTS.md`.\n")
        L.append(f"Reproduce with `bench/run.sh` (full) or `bench/run.sh --smoke` (CI). Generated "
                 f"{time.strftime('%Y-%m-%d %H:%M %Z')} from fencepost {m['rev']}, release build "
                 "statically linked (`-C target-feature=+crt-static -C relocation-model=static`), "
                 f"its functions laid out by `tools/link-order.txt` ({self.link_order} listed "
                 "functions found in the build; row 1c "
                 "and the lock-hold "
                 "rows, which need LD_PRELOAD, use the default dynamic build, as do rows "
                 "8a-8b, timed within one process); "
                 f"the run took {(time.monotonic() - started) / 60:.1f} min.\n")
        L.append(f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem']} RAM, kernel {m['kernel']}; "
                 f"bench folder on `{m['fs']}`. Load average (1/5/15 min) {load0[0]:.2f}/"
                 f"{load0[1]:.2f}/{load0[2]:.2f} at the start, {load1[0]:.2f}/{load1[1]:.2f}/"
                 f"{load1[2]:.2f} at the end (a shared machine). {m['hyperfine']}, {m['rustc']}.\n")
        L.append("Ratio = A / B: below 1, A is faster. Each timed row ran in "
                 f"{c['rounds']} rounds (rows 4-5: {c['big_rounds']} and {c['cont_rounds']}) with "
                 "A and B back to back in every round; the ratio is the median over rounds of "
                 "median(A)/median(B), the spread the min and max of the round ratios. A and B "
                 "columns are medians of the round medians. Rows 1, 1c and 2 spawn each command "
                 "directly, no shell around it (`bench/spawntime.c`), the commands taking turns "
                 "sample by sample in a shuffled order, each sample after the same untimed "
                 f"`claim`; {c['runs']} samples per command per round after {c['warmup']} "
                 "discarded. Row 1d times row 1's pair the way hyperfine does through a shell. "
                 "The other timed rows are hyperfine's (order reversed every other round). "
                 "Rows 4d-4e, 5c-5e are measured outside both; their spread is over the "
                 "samples named in the row. Rows 8a-8b are timed inside one program "
                 "(`examples/bench_api.rs`, default release build), A and B taking turns "
                 f"sample by sample in a shuffled order, {c['api_samples']} samples each per "
                 f"round after {c['api_warmup']} discarded, in {c['api_rounds']} rounds.\n")
        L.append("| # | Comparison: A vs B | A | B | Ratio A/B | Spread (min-max) | Goal | Result |")
        L.append("|---|---|--:|--:|--:|--:|---|---|")
        for r in self.rows:
            ratio = "-" if r["ratio"] != r["ratio"] else f"{r['ratio']:.2f}"
            spread = "-" if r["lo"] != r["lo"] else f"{r['lo']:.2f}-{r['hi']:.2f}"
            L.append(f"| {r['num']} | {r['title']} | {r['a']} | {r['b']} | {ratio} | {spread} | "
                     f"{r['goal']} | {r['verdict']} |")
        L.append("")
        L.append(self.detail_text())
        L += self.details
        notes = self.here / "notes.md"
        if notes.exists():
            L.append(notes.read_text())
        self.out.write_text("\n".join(L).rstrip() + "\n")

    def detail_text(self):
        c = self.cfg
        L = ["## Details\n"]
        if hasattr(self, "cont_medians"):
            W, N = c["workers"], c["writes"]
            L.append(f"### Contention ({W} processes x {N} publishes each, {W * N} in all)\n")
            L.append("| Scenario | Wall time (median) | Publishes/s | ok | busy (exit 7) | other failures |")
            L.append("|---|--:|--:|--:|--:|--:|")
            for name, label in [("fence-distinct", f"fencepost, {W} documents"),
                                ("flock-distinct", f"flock + shell, {W} documents"),
                                ("fence-one", "fencepost, one document, in turn"),
                                ("flock-one", "flock + shell, one document, in turn")]:
                t = statistics.median(self.cont_medians[name])
                tl = self.tally[name]
                L.append(f"| {label} | {fmt_time(t)} | {W * N / t:.0f} | {tl['ok']} | {tl['busy']} |"
                         f" {tl['other']} |")
            L.append(f"\nok/busy/other are summed over all {c['cont_rounds']} rounds. A fencepost "
                     "publish is three processes (claim, write, release), each one IMMEDIATE "
                     "transaction with its own fsynced commit; the flock publish is six (flock, "
                     "sh, cat, sync, mv, sync).\n")
            L.append("State-file write lock held per transaction under contention (an untimed "
                     f"pass of {W} x {c['hold_writes']} publishes with the LD_PRELOAD shim):\n")
            L.append("| Scenario | Command | n | median | p90 | max | lock busy (sum of holds / wall) |")
            L.append("|---|---|--:|--:|--:|--:|--:|")
            for share, (holds, wall) in self.cont_holds.items():
                total = sum(h["hold"] for hs in holds.values() for h in hs)
                for cmd in ("claim", "write", "release"):
                    hs = [h["hold"] for h in holds.get(cmd, [])]
                    if not hs:
                        continue
                    L.append(f"| {share} | {cmd} | {len(hs)} | {fmt_time(statistics.median(hs))} |"
                             f" {fmt_time(pct(90, hs))} | {fmt_time(max(hs))} | "
                             f"{total / wall * 100:.0f}% |")
            L.append("")
        if hasattr(self, "lock_results"):
            lr = self.lock_results
            size = fmt_size(c["mid"])
            L.append(f"### Does a {size} write block other documents?\n")
            L.append("Method: `bench/lockhold.c`, an LD_PRELOAD shim, timestamps (CLOCK_MONOTONIC) "
                     "the `fcntl(F_SETLK)` calls with which SQLite takes and drops the WAL write lock"
                     " (byte 120 of `state.db-shm`): that lock is what `BEGIN IMMEDIATE` acquires "
                     "and COMMIT releases, so W..U is exactly the time other writers are shut out. "
                     "No ptrace, no failpoints, no change to the binary. Meanwhile, this script "
                     "writes 4 KiB to document B (claim, then a timed `write`) in a loop for as long"
                     " as the big write of document A runs, and keeps the B writes that started and"
                     " ended before A took the lock.\n")
            L.append("| | n | median | max |")
            L.append("|---|--:|--:|--:|")
            L.append(f"| 4 KiB write, idle machine: latency | {len(lr['idle'])} | "
                     f"{fmt_time(statistics.median(lr['idle']))} | {fmt_time(max(lr['idle']))} |")
            L.append(f"| 4 KiB write: lock held | {len(lr['small_holds'])} | "
                     f"{fmt_time(statistics.median(lr['small_holds']))} | "
                     f"{fmt_time(max(lr['small_holds']))} |")
            for kind, r in lr["runs"].items():
                how = f"fed over {c['pace_s']:g} s" if kind == "paced" else "`--from`, disk speed"
                L.append(f"| {size} write ({how}): staging, no lock | {len(r['staging'])} | "
                         f"{fmt_time(statistics.median(r['staging']))} | {fmt_time(max(r['staging']))} |")
                L.append(f"| {size} write ({how}): lock held | {len(r['holds'])} | "
                         f"{fmt_time(statistics.median(r['holds']))} | {fmt_time(max(r['holds']))} |")
                if r["during"]:
                    L.append(f"| 4 KiB write to B meanwhile ({kind}): latency | {len(r['during'])} |"
                             f" {fmt_time(statistics.median(r['during']))} | "
                             f"{fmt_time(max(r['during']))} |")
            L.append("")
        if hasattr(self, "rss"):
            mib = lambda n: f"{n / MIB:.1f}"  # noqa: E731
            L.append(f"### Peak memory, {fmt_size(c['big'])} document\n")
            L.append("`/usr/bin/time -v`, Maximum resident set size, MiB, per sample: "
                     + "; ".join(f"{k}: {', '.join(mib(x) for x in v)}" for k, v in self.rss.items())
                     + ". From stdin the write streams through four 128 KiB buffers; with "
                     "`--from` the kernel copies and one 128 KiB buffer reads the staged file "
                     "back for the hash.\n")
        if hasattr(self, "tree_info"):
            mib = lambda n: f"{n / MIB:.1f}"  # noqa: E731
            L.append("### Trees (rows 9a-9d)\n")
            L.append("Each side publishes the same source folder over and over into a folder "
                     "of its own on the bench filesystem: A into a fencepost root (`site`), B "
                     "into `v.<time>/` with `current` a symlink to it. A and B take turns sample "
                     "by sample in a shuffled order, each spawned as `sh -c '...'` by "
                     "`bench/spawntime.c`. Before every sample, untimed: A's claim, on both sides "
                     "the removal of the version replaced last (fencepost keeps it for "
                     "`--keep-old`, 60 s by default; a deployment keeps its last release a while "
                     "too), and a `sync`. After the timed samples each side's folder is compared "
                     "with the source (`diff -r`).\n")
            for tag, t in self.tree_info.items():
                L.append(f"- {t['what']}: {t['rounds']} rounds of {t['runs']} samples a side "
                         f"after {t['warmup']} discarded; peak RSS, MiB, per sample: fencepost "
                         + ", ".join(mib(x) for x in t["rss"]["fencepost"]) + "; rsync "
                         + ", ".join(mib(x) for x in t["rss"]["rsync"]) + ".")
            L.append("")
        if hasattr(self, "prune"):
            p = self.prune
            L.append("### One-off: a log above its retention cap\n")
            L.append(f"With {p['events']:,} log events and `FENCEPOST_LOG_KEEP={p['keep']:,}`, the "
                     f"write whose event id is a multiple of 1000 prunes the excess in its own "
                     f"transaction: that write took {fmt_time(p['took'])} and held the state-file "
                     f"lock for {fmt_time(p['hold'])} (every other writer waits, up to "
                     "`--busy-timeout`). It happens once, after the cap is lowered; in steady "
                     "state a prune drops about 1000 rows.\n")
        return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--fp", required=True)
    ap.add_argument("--fp-dynamic", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--spawntime", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--api", help="examples/bench_api.rs built (rows 8a-8b)")
    ap.add_argument("--link-order", default="?/?",
                    help="FOUND/LISTED: functions of tools/link-order.txt in the build")
    ap.add_argument("--only", default="", help="comma list of parts (debugging): "
                    "small,big,contention,lock,scale,startup,api,trees,profiles")
    args = ap.parse_args()
    started = time.monotonic()
    load0 = os.getloadavg()
    b = Bench(args)
    parts = [("small", b.publish_small), ("big", b.big_documents), ("contention", b.contention),
             ("lock", b.lock_scope), ("scale", b.scale), ("startup", b.startup),
             ("api", b.api), ("trees", b.trees), ("profiles", b.profiles)]
    only = set(filter(None, args.only.split(",")))
    for name, fn in parts:
        if only and name not in only:
            continue
        b.log(f"part: {name}")
        fn()
    order = {k: i for i, k in enumerate(["1", "1b", "1c", "1d", "2", "3", "4a", "4b", "4c", "4d", "4e", "5a", "5b", "5c",
                                         "5d", "5e", "6a", "6b", "7a", "7b", "8a",
                                         "8b", "9a", "9b", "9c", "9d"])}
    b.rows.sort(key=lambda r: order.get(r["num"], 99))
    b.report(started, load0)
    b.log(f"wrote {args.out} in {(time.monotonic() - started):.0f} s")


if __name__ == "__main__":
    main()
