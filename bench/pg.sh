#!/usr/bin/env bash
# The PostgreSQL rows of the benchmarks: a private cluster, then bench/pg.py.
#
#   bench/pg.sh [--smoke] --fp FENCEPOST --work DIR --out RESULTS.md
#
# Called by bench/run.sh after bench/bench.py has written RESULTS.md; appends one section
# to it. Starts a PostgreSQL cluster of its own in DIR/pg (initdb as the `postgres` user
# when run as root, listening on a Unix socket in that folder only, no TCP) with the
# server binaries of /usr/lib/postgresql/*/bin (the newest), and stops it on exit, whatever
# happens. Without those binaries the section says the rows were skipped, and why.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke="" fp="" work="" out=""
while (($#)); do
  case $1 in
    --smoke) smoke=--smoke; shift ;;
    --fp) fp=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/pg.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -n $fp && -n $work && -n $out ]] || { echo "bench/pg.sh: --fp, --work and --out are needed" >&2; exit 2; }

skip() {
  printf '\n## PostgreSQL store\n\nskipped: %s\n' "$1" >>"$out"
  echo "bench/pg.sh: skipped: $1" >&2
  exit 0
}

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[[ -n $bin && -x $bin/initdb && -x $bin/pg_ctl ]] ||
  skip "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb); install the postgresql package to measure them"
command -v psql >/dev/null || skip "no psql on PATH"
[[ -x /usr/bin/time ]] || skip "no /usr/bin/time (the time package)"

# Run the server's tools as `postgres` when we are root (initdb refuses root), else as us.
as_pg=()
if [[ $(id -u) == 0 ]]; then
  id postgres >/dev/null 2>&1 || skip "running as root and there is no postgres user to run the server as"
  as_pg=(runuser -u postgres --)
fi

cluster=$(cd "$work" && pwd)/pg
mkdir -p "$cluster"
if [[ ${#as_pg[@]} != 0 ]]; then
  chmod a+x "$work" # the server's user must reach its folder (mktemp -d makes it 0700)
  chown postgres "$cluster"
fi
"${as_pg[@]}" "$bin/initdb" -D "$cluster/data" -A trust -U postgres --no-sync >"$cluster/initdb.log" 2>&1 ||
  { cat "$cluster/initdb.log" >&2; echo "bench/pg.sh: initdb failed" >&2; exit 1; }
stop() { "${as_pg[@]}" "$bin/pg_ctl" -D "$cluster/data" -m fast stop >/dev/null 2>&1 || true; }
trap stop EXIT
# Default durability (fsync, synchronous_commit on): what a user gets, on the bench's disk.
"${as_pg[@]}" "$bin/pg_ctl" -D "$cluster/data" -w -l "$cluster/server.log" \
  -o "-c listen_addresses='' -c unix_socket_directories=$cluster" start >/dev/null ||
  { cat "$cluster/server.log" >&2; echo "bench/pg.sh: the server did not start" >&2; exit 1; }
version=$("$bin/postgres" --version)

python3 bench/pg.py $smoke --fp "$fp" --work "$work" --out "$out" --socket "$cluster" \
  --server-version "$version" --server-log "$cluster/server.log"
