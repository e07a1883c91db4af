#!/usr/bin/env python3
"""The PostgreSQL rows of fencepost's benchmarks, run by bench/pg.sh against a private
cluster on a Unix socket; appends one section to RESULTS.md.

  P1  claim + write 4 KiB + complete, one process each: store vs state file (and the
      store with a mirror root on the writing host, which applies the version at once)
  P2  8 processes publishing (claim --wait, write, release) to 8 documents and to one:
      store vs state file
  P3  mirror propagation: `mirror --follow` on a second root; time from the exit of
      `write` (no mirror root of its own, so it exits right after its COMMIT) to the
      document renamed on that root, seen by inotify (IN_MOVED_TO), content checked
  P4  a 1 GiB document through the store: `write --from` and `mirror` on a fresh root,
      wall time and peak RSS (`/usr/bin/time`)
  P5  the publish of P1 against its floor: three processes that each connect with the
      same client crate and commit one transaction inserting 4 KiB (--floor); and the
      publish through PgBouncer in transaction mode against the same direct (--pooler),
      and over TCP with TLS (sslmode=verify-full) against plain TCP (--tcp, --ca)

Each store row uses a database of its own. Ratios within this run are the result; the
machine is shared.
"""

import argparse
import ctypes
import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

FULL = dict(rounds=200, blocks=5, workers=8, writes=100, publishes=200, big=1 << 30)
SMOKE = dict(rounds=6, blocks=2, workers=8, writes=3, publishes=10, big=4 << 20)
MIB = 1 << 20
IN_MOVED_TO = 0x80


def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def pct(p, values):
    values = sorted(values)
    if not values:
        return None
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


class Inotify:
    """Renames onto `name` in one folder (IN_MOVED_TO), each stamped with time.monotonic()
    by a reader thread the moment it is read, with the file's content read right then (so
    a late event is never matched with a newer version)."""

    def __init__(self, folder, name):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(0)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, str(folder).encode(), IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        self.path, self.name = Path(folder) / name, name
        self.events = []  # (monotonic, content)
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            buf = os.read(self.fd, 65536)
            now = time.monotonic()
            off = 0
            while off < len(buf):
                _wd, _mask, _cookie, size = struct.unpack_from("iIII", buf, off)
                name = buf[off + 16:off + 16 + size].rstrip(b"\0").decode()
                off += 16 + size
                if name != self.name:
                    continue
                try:
                    content = self.path.read_bytes()
                except OSError:
                    content = None
                with self.cond:
                    self.events.append((now, content))
                    self.cond.notify_all()

    def wait_for(self, content, since_index, timeout):
        """The time of the first rename at or after events[since_index] that put `content`
        in place (any content if None), or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, c in self.events[since_index:]:
                    if content is None or c == content:
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


class PgBench:
    def __init__(self, a):
        self.cfg = SMOKE if a.smoke else FULL
        self.smoke = a.smoke
        self.fp = str(Path(a.fp).resolve())
        self.work = Path(a.work).resolve() / "pgbench"
        self.work.mkdir(parents=True, exist_ok=True)
        self.out = Path(a.out)
        self.socket, self.port = a.socket, a.port
        self.version = a.server_version
        self.server_log = Path(a.server_log)
        self.here = Path(__file__).resolve().parent
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEPOST_")}
        self.env["LC_ALL"] = "C"
        self.in4k = self.work / "in4k"
        self.in4k.write_bytes(os.urandom(4096))
        self.rows, self.details = [], []
        self.seq = 0
        self.pooler, self.pooler_version = a.pooler, a.pooler_version
        self.floor = a.floor
        self.tcp_port, self.ca = (a.port if a.tcp else None), a.ca

    def log(self, msg):
        print(f"[pg {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def psql(self, sql, db="postgres"):
        return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.socket, "-p", self.port,
                               "-U", "postgres", "-d", db, "-c", sql], check=True,
                              stdout=subprocess.PIPE, text=True, env=self.env).stdout.strip()

    def database(self, name):
        self.psql(f"CREATE DATABASE {name}")
        return f"postgresql:///{name}?host={self.socket}&port={self.port}&user=postgres"

    def folder(self, name):
        self.seq += 1
        path = self.work / f"{self.seq:02d}-{name}"
        path.mkdir()
        return path

    def run(self, args, cwd, env=None, ok=(0,)):
        t0 = time.monotonic()
        res = subprocess.run([self.fp, *map(str, args)], cwd=cwd, env=env or self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        took = time.monotonic() - t0
        if res.returncode not in ok:
            raise SystemExit(f"bench/pg.py: fencepost {' '.join(map(str, args))} exited "
                             f"{res.returncode}: {res.stderr.strip()}")
        return res, took

    def row(self, num, title, a, b, ratio, spread, goal, result):
        self.rows.append((num, title, a, b, ratio, spread, goal, result))

    # ------------------------------------------------------------------ P1

    def publish_cycle(self, cwd, pre, doc):
        t = {}
        res, t["claim"] = self.run([*pre, "claim", doc, "--owner", "bench", "--ttl", "60s"], cwd)
        epoch = res.stdout.strip()
        _, t["write"] = self.run([*pre, "-q", "write", doc, "--epoch", epoch, "--owner", "bench",
                                  "--from", self.in4k], cwd)
        _, t["complete"] = self.run([*pre, "-q", "complete", doc, "--owner", "bench", "--epoch",
                                     epoch], cwd)
        t["total"] = t["claim"] + t["write"] + t["complete"]
        return t

    def cycle(self):
        c = self.cfg
        self.log(f"P1: claim + write 4 KiB + complete, {c['rounds']} rounds per variant")
        url = self.database("bench_cycle")
        mirror_url = self.database("bench_cycle_mirror")
        sqlite_root, bare, mirror = self.folder("cycle-sqlite"), self.folder("cycle-store"), \
            self.folder("cycle-store-mirror")
        variants = {
            "sqlite": (sqlite_root, ["--root", sqlite_root]),
            "store": (bare, ["--store", url]),
            "store+mirror": (mirror, ["--store", mirror_url, "--root", mirror]),
        }
        if self.pooler:
            self.database("bench_cycle_pooled")
            pooled_url = f"postgresql:///bench_cycle_pooled?host={self.pooler}&port=6432&user=postgres"
            variants["pooled"] = (self.folder("cycle-pooled"), ["--store", pooled_url])
        if self.tcp_port:
            # The same server over TCP on 127.0.0.1, plain and with TLS checked in full.
            self.database("bench_cycle_tcp")
            self.database("bench_cycle_tls")
            tcp = f"postgresql://postgres@127.0.0.1:{self.tcp_port}/bench_cycle_tcp?sslmode=disable"
            tls = (f"postgresql://postgres@localhost:{self.tcp_port}/bench_cycle_tls?sslmode=verify-full"
                   f"&sslrootcert={self.ca}")
            variants["tcp"] = (self.folder("cycle-tcp"), ["--store", tcp])
            variants["tls"] = (self.folder("cycle-tls"), ["--store", tls])
        if self.floor:
            floor_url = self.database("bench_floor")
            self.psql("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, data bytea)", db="bench_floor")
            variants["floor"] = (None, [floor_url])
        times = {k: [] for k in variants}
        names = list(variants)
        for i in range(c["rounds"]):
            order = names if i % 2 == 0 else names[::-1]  # a drift in load hits all alike
            for k in order:
                cwd, pre = variants[k]
                if k == "floor":
                    times[k].append(self.floor_cycle(pre[0]))
                else:
                    times[k].append(self.publish_cycle(cwd, pre, "job.md"))
        med = {k: {s: statistics.median(t[s] for t in v) for s in ("claim", "write", "complete", "total")}
               for k, v in times.items()}
        size = len(times["sqlite"]) // c["blocks"]

        def spread(a, b):
            ratios = []
            for j in range(c["blocks"]):
                sl = slice(j * size, (j + 1) * size)
                ratios.append(statistics.median(t["total"] for t in times[a][sl]) /
                              statistics.median(t["total"] for t in times[b][sl]))
            return f"{min(ratios):.2f}-{max(ratios):.2f}"

        for num, k, what in (("P1", "store", "no mirror root"),
                             ("P1b", "store+mirror", "with a mirror root on the writing host")):
            a, b = med[k]["total"], med["sqlite"]["total"]
            self.row(num, f"claim + write 4 KiB + complete (3 processes): PostgreSQL store, {what}, "
                     f"vs state file", ms(a), ms(b), f"{a / b:.2f}", spread(k, "sqlite"), "report",
                     f"reported; per command (store / state file): claim {ms(med[k]['claim'])} / "
                     f"{ms(med['sqlite']['claim'])}, write {ms(med[k]['write'])} / "
                     f"{ms(med['sqlite']['write'])}, complete {ms(med[k]['complete'])} / "
                     f"{ms(med['sqlite']['complete'])}")
        if self.floor:
            a, b = med["store"]["total"], med["floor"]["total"]
            self.row("P5", "claim + write 4 KiB + complete (3 processes) on the store vs 3 processes that "
                     "each connect with the same client crate and commit one transaction inserting 4 KiB "
                     "(`examples/bench_pg_floor.rs`)", ms(a), ms(b), f"{a / b:.2f}", spread("store", "floor"),
                     "<= 1.3x", ("met" if a / b <= 1.3 else f"**missed** by {a / b / 1.3 - 1:.0%}") +
                     f"; per process (fencepost / floor): claim {ms(med['store']['claim'])}, write "
                     f"{ms(med['store']['write'])}, complete {ms(med['store']['complete'])} / "
                     f"{ms(med['floor']['total'] / 3)}")
        else:
            self.row("P5", "claim + write 4 KiB + complete vs its floor", "-", "-", "-", "-", "<= 1.3x",
                     "skipped: no --floor program given")
        if self.pooler:
            a, b = med["pooled"]["total"], med["store"]["total"]
            self.row("P5b", f"claim + write 4 KiB + complete (3 processes) through PgBouncer in transaction "
                     f"mode ({self.pooler_version}, its own Unix socket) vs direct to the server", ms(a), ms(b),
                     f"{a / b:.2f}", spread("pooled", "store"), "report",
                     f"reported; per command (pooled / direct): claim {ms(med['pooled']['claim'])} / "
                     f"{ms(med['store']['claim'])}, write {ms(med['pooled']['write'])} / "
                     f"{ms(med['store']['write'])}, complete {ms(med['pooled']['complete'])} / "
                     f"{ms(med['store']['complete'])}")
        else:
            self.row("P5b", "publish through PgBouncer vs direct", "-", "-", "-", "-", "report",
                     "skipped: pgbouncer is not installed")
        if self.tcp_port:
            a, b = med["tls"]["total"], med["tcp"]["total"]
            self.row("P5c", "claim + write 4 KiB + complete (3 processes) over TCP on 127.0.0.1 with TLS "
                     "(`sslmode=verify-full`, a CA of the run's own) vs plain TCP, the same server", ms(a), ms(b),
                     f"{a / b:.2f}", spread("tls", "tcp"), "report",
                     f"reported; per command (TLS / plain): claim {ms(med['tls']['claim'])} / "
                     f"{ms(med['tcp']['claim'])}, write {ms(med['tls']['write'])} / "
                     f"{ms(med['tcp']['write'])}, complete {ms(med['tls']['complete'])} / "
                     f"{ms(med['tcp']['complete'])}; the Unix socket: {ms(med['store']['total'])}")
        else:
            self.row("P5c", "publish with TLS vs plain TCP", "-", "-", "-", "-", "report",
                     "skipped: no openssl to make the certificates")
        self.cycle_times = times

    def floor_cycle(self, url):
        """Three floor processes, timed as the publish's three are."""
        t = {}
        for part in ("claim", "write", "complete"):
            t0 = time.monotonic()
            res = subprocess.run([self.floor, url, str(self.in4k)], env=self.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t[part] = time.monotonic() - t0
            if res.returncode != 0:
                raise SystemExit(f"bench/pg.py: {self.floor} exited {res.returncode}: {res.stderr.strip()}")
        t["total"] = t["claim"] + t["write"] + t["complete"]
        return t

    # ------------------------------------------------------------------ P2

    def contention(self):
        c = self.cfg
        W, N = c["workers"], c["writes"]
        self.log(f"P2: {W} processes x {N} publishes, state file and store, distinct and one")
        contend = self.here / "lib" / "contend.sh"
        results = {}
        for share in ("distinct", "one"):
            url = self.database(f"bench_cont_{share}")
            for kind in ("sqlite", "store"):
                root = self.folder(f"cont-{kind}-{share}")
                out = root.parent / f"{root.name}.out"
                env = dict(self.env, FP=self.fp)
                if kind == "store":
                    env["FENCEPOST_STORE"] = url  # no root in that folder: names are the store's
                t0 = time.monotonic()
                subprocess.run(["sh", str(contend), "fence", share, str(W), str(N), str(root),
                                str(self.in4k), str(out)], env=env, check=True)
                wall = time.monotonic() - t0
                t = dict(ok=0, busy=0, other=0, codes=[])
                for line in out.read_text().splitlines():
                    fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                    for k in ("ok", "busy", "other"):
                        t[k] += int(fields.get(k, 0))
                    t["codes"] += line.split("codes=", 1)[1].split()
                results[(kind, share)] = (wall, t)
        self.details.append("### PostgreSQL: contention (one pass each, side by side)\n")
        self.details.append("| Store | Documents | Wall time | Publishes/s | ok | busy (exit 7) | other failures |")
        self.details.append("|---|---|--:|--:|--:|--:|--:|")
        for (kind, share), (wall, t) in results.items():
            self.details.append(f"| {kind} | {share} | {wall:.2f} s | {W * N / wall:.0f} | {t['ok']} | "
                                f"{t['busy']} | {t['other']}{' (' + ' '.join(sorted(set(t['codes']))) + ')' if t['codes'] else ''} |")
        self.details.append("")
        for num, share, what in (("P2a", "distinct", f"{W} distinct documents"),
                                 ("P2b", "one", "one document, claiming in turn (`claim --wait`)")):
            (wa, ta), (wb, _) = results[("store", share)], results[("sqlite", share)]
            ok = ta["busy"] == 0 and ta["other"] == 0
            self.row(num, f"Contention: {W} processes x {N} publishes (claim, write, release) to {what}: "
                     f"PostgreSQL store vs state file", f"{wa:.2f} s", f"{wb:.2f} s", f"{wa / wb:.2f}",
                     "one pass", "busy = 0",
                     f"{'met' if ok else '**missed**'}; {W * N / wa:.0f} writes/s; busy (exit 7): "
                     f"{ta['busy']}; other failures: {ta['other']}")

    # ------------------------------------------------------------------ P3

    def propagation(self):
        c = self.cfg
        n = c["publishes"]
        self.log(f"P3: mirror propagation over {n} publishes")
        url = self.database("bench_mirror")
        writer, second = self.folder("mirror-writer"), self.folder("mirror-second")

        def publish(path):
            """claim, write (returns the moment it exited), release: a new epoch each time,
            as a job publishes; a second version under one epoch would be a conflict."""
            res, _ = self.run(["--store", url, "claim", "doc.md", "--owner", "bench", "--ttl", "1h"], writer)
            epoch = res.stdout.strip()
            self.run(["--store", url, "-q", "write", "doc.md", "--epoch", epoch, "--owner", "bench",
                      "--from", path], writer)
            done = time.monotonic()
            self.run(["--store", url, "-q", "release", "doc.md", "--owner", "bench", "--epoch", epoch],
                     writer)
            return done

        # A first version, so that the second root exists before the follower starts.
        first = writer / "v"
        first.write_bytes(b"version 0\n")
        publish(first)
        self.run(["--store", url, "--root", second, "mirror"], writer)
        watch = Inotify(second, "doc.md")
        log = open(self.work / "follow.log", "w")
        follower = subprocess.Popen([self.fp, "--store", url, "--root", str(second), "mirror", "--follow"],
                                    cwd=writer, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        lat, missed = [], 0
        try:
            # The follower listens before its first full pass: once a version published now
            # reaches the second root, it is listening. Not timed.
            warm = writer / "v0"
            warm.write_bytes(b"version 0, again\n")
            mark = len(watch.events)
            publish(warm)
            if watch.wait_for(None, mark, 30.0) is None:
                raise SystemExit("bench/pg.py: mirror --follow applied nothing within 30 s; see "
                                 f"{self.work / 'follow.log'}")
            for i in range(1, n + 1):
                body = f"version {i}\n".encode() + os.urandom(64)
                src = writer / f"v{i}"
                src.write_bytes(body)
                mark = len(watch.events)
                done = publish(src)
                seen = watch.wait_for(body, mark, 10.0)
                if seen is None:
                    missed += 1
                else:
                    lat.append(seen - done)
                src.unlink()
        finally:
            follower.terminate()
            follower.wait()
            log.close()
        p50, p99 = pct(50, lat), pct(99, lat)
        ok = p99 is not None and p99 < 0.050 and missed == 0
        self.row("P3", f"Mirror propagation: `write` exits (after its COMMIT) to the document renamed on a "
                 f"second root by `mirror --follow`, {n} publishes, p50 / p99",
                 ms(p50), ms(p99), "-", f"min {ms(min(lat)) if lat else '-'}, max {ms(max(lat)) if lat else '-'}",
                 "p99 < 50 ms", f"{'met' if ok else '**missed**'}; {len(lat)} seen, {missed} not seen "
                 f"within 10 s")
        self.prop = lat

    # ------------------------------------------------------------------ P4

    def timed(self, args, cwd):
        """Wall time and peak RSS (KiB) of one run, by /usr/bin/time: a small parent whose
        fork is all the process holds before exec. (Linux keeps the larger of the pre-exec
        and post-exec peaks in ru_maxrss, so timing it from python's own child would report
        python's size.)"""
        report = self.work / "time.out"
        t0 = time.monotonic()
        res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(report), self.fp, *map(str, args)],
                             cwd=cwd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        took = time.monotonic() - t0
        if res.returncode != 0:
            raise SystemExit(f"bench/pg.py: fencepost {' '.join(map(str, args))} exited "
                             f"{res.returncode}: {res.stderr.strip()}")
        return took, int(report.read_text().split()[-1])

    def big(self):
        size = self.cfg["big"]
        self.log(f"P4: {size >> 20} MiB through the store")
        url = self.database("bench_big")
        here, mirror = self.folder("big-writer"), self.folder("big-mirror")
        src = here / "big.bin"
        with open(src, "wb") as f:
            left = size
            while left:
                chunk = min(left, 8 * MIB)
                f.write(os.urandom(chunk))
                left -= chunk
        res, _ = self.run(["--store", url, "claim", "big.bin", "--owner", "bench", "--ttl", "1h"], here)
        epoch = res.stdout.strip()
        w_took, w_rss = self.timed(["--store", url, "-q", "write", "big.bin", "--epoch", epoch,
                                              "--owner", "bench", "--from", src], here)
        m_took, m_rss = self.timed(["--store", url, "--root", mirror, "mirror", "big.bin"], here)
        same = subprocess.run(["cmp", "-s", str(src), str(mirror / "big.bin")]).returncode == 0
        db = int(self.psql("SELECT pg_database_size(current_database())", "bench_big"))
        label = f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"
        self.row("P4a", f"Big: {label} `write --from` into the store, then `mirror` it onto a fresh root: "
                 "wall time, write / mirror", f"{w_took:.2f} s", f"{m_took:.2f} s", "-", "one run", "report",
                 f"reported; mirror copy {'identical' if same else '**DIFFERS**'}; database "
                 f"{db / MIB:.0f} MiB afterwards")
        ok = max(w_rss, m_rss) < 16 * 1024 and same
        self.row("P4b", f"Big: peak RSS (`/usr/bin/time`), {label} `write --from` / `mirror`",
                 f"{w_rss / 1024:.1f} MiB", f"{m_rss / 1024:.1f} MiB", "-", "one run",
                 "< 16 MiB", "met" if ok else "**missed**")
        src.unlink()
        shutil.rmtree(mirror, ignore_errors=True)

    # ------------------------------------------------------------------ output

    def write(self, took):
        L = ["", "## PostgreSQL store", ""]
        L.append(f"Measured by `bench/pg.sh` in the same run as the rows above: {self.version}, a private "
                 "cluster made with initdb in the bench folder (default durability: fsync and "
                 "synchronous_commit on), Unix socket only; one database per row; the same static "
                 f"build. {'**Smoke run**: tiny sizes. ' if self.smoke else ''}This section took "
                 f"{took / 60:.1f} min. A and B are what the row says; the ratio is A / B.")
        L.append("")
        L.append("| # | Comparison: A vs B | A | B | Ratio A/B | Spread | Goal | Result |")
        L.append("|---|---|--:|--:|--:|--:|---|---|")
        for r in self.rows:
            L.append("| " + " | ".join(r) + " |")
        L.append("")
        L += self.details
        kinds = {}
        for line in self.server_log.read_text(errors="replace").splitlines():
            for level in ("ERROR:", "FATAL:", "PANIC:"):
                if f" {level} " in line:
                    text = level + line.split(level, 1)[1]
                    kinds[text.strip()] = kinds.get(text.strip(), 0) + 1
        L.append(f"Server log: {sum(kinds.values())} ERROR/FATAL/PANIC lines"
                 + (":" if kinds else "."))
        for text, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
            L.append(f"- {count} x `{text[:200]}`")
        L.append("")
        with open(self.out, "a", encoding="utf-8") as f:
            f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--fp", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--server-version", required=True)
    ap.add_argument("--server-log", required=True)
    ap.add_argument("--pooler", help="the socket folder of a PgBouncer in transaction mode in front of the server")
    ap.add_argument("--pooler-version", default="")
    ap.add_argument("--floor", help="row P5's floor program (examples/bench_pg_floor.rs)")
    ap.add_argument("--port", default="5432", help="the server's port (its socket's name, and TCP's with --tcp)")
    ap.add_argument("--tcp", action="store_true", help="the server listens on 127.0.0.1 too, offering TLS (row P5c)")
    ap.add_argument("--ca", help="the CA file that signed the server's certificate for localhost")
    b = PgBench(ap.parse_args())
    t0 = time.monotonic()
    b.cycle()
    b.contention()
    b.propagation()
    b.big()
    b.write(time.monotonic() - t0)
    print(f"bench/pg.py: appended the PostgreSQL section to {b.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
