#!/usr/bin/env bash
# The PostgreSQL rows of the benchmarks: a private cluster, then bench/pg.py.
#
#   bench/pg.sh [--smoke] --fp FENCEPOST --work DIR --out RESULTS.md [--floor PROGRAM]
#
# Called by bench/run.sh after bench/bench.py has written RESULTS.md; appends one section
# to it. Starts a PostgreSQL cluster of its own in DIR/pg (initdb as the `postgres` user
# when run as root, listening on a Unix socket in that folder only, no TCP) with the
# server binaries of /usr/lib/postgresql/*/bin (the newest), and stops it on exit, whatever
# happens. Without those binaries the section says the rows were skipped, and why. With
# pgbouncer installed it also starts one in transaction mode in front of the cluster (its
# own socket in DIR/pgbouncer), for the rows through a pooler. PROGRAM is row P5's floor
# (examples/bench_pg_floor.rs). With openssl it also listens on TCP at 127.0.0.1 with TLS
# (a CA and certificate of its own), for the row TLS vs plain TCP.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke="" fp="" work="" out="" floor=""
while (($#)); do
  case $1 in
    --smoke) smoke=--smoke; shift ;;
    --fp) fp=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --floor) floor=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
pooler_pid=""
stop() {
  if [[ -n $pooler_pid ]]; then kill "$pooler_pid" 2>/dev/null || true; fi
  "${as_pg[@]}" "$bin/pg_ctl" -D "$cluster/data" -m fast stop >/dev/null 2>&1 || true
}
trap stop EXIT
# For the TLS row: a CA of the run's own and a certificate it signs for localhost, and the
# server on a free TCP port of 127.0.0.1 too (initdb's rules trust it as the socket), TLS
# offered there (the port names the socket too). Without openssl the server keeps to its
# socket and the row says why.
listen="listen_addresses=''" tls=() port=5432
if command -v openssl >/dev/null; then
  certs=$cluster/certs
  mkdir -p "$certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench-ca -keyout "$certs/ca.key" \
    -out "$certs/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$certs/server.key" \
    -out "$certs/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost\n' >"$certs/san.ext"
  openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
    -CAcreateserial -days 2 -extfile "$certs/san.ext" -out "$certs/server.crt" >/dev/null 2>&1
  chmod 600 "$certs/server.key"
  [[ ${#as_pg[@]} != 0 ]] && chown -R postgres "$certs"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  listen="listen_addresses=127.0.0.1 -c port=$port -c ssl=on -c ssl_cert_file=$certs/server.crt -c ssl_key_file=$certs/server.key"
  tls=(--tcp --ca "$certs/ca.crt")
fi
# Default durability (fsync, synchronous_commit on): what a user gets, on the bench's disk.
"${as_pg[@]}" "$bin/pg_ctl" -D "$cluster/data" -w -l "$cluster/server.log" \
  -o "-c $listen -c unix_socket_directories=$cluster" start >/dev/null ||
  { cat "$cluster/server.log" >&2; echo "bench/pg.sh: the server did not start" >&2; exit 1; }
version=$("$bin/postgres" --version)

# PgBouncer in transaction mode, every database of the cluster behind it, trust on its
# own socket as on the server's.
pooler=()
pgbouncer=$(command -v pgbouncer || { [[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer; } || true)
if [[ -n $pgbouncer ]]; then
  pool=$(cd "$work" && pwd)/pgbouncer
  mkdir -p "$pool"
  printf '%s\n' '[databases]' "* = host=$cluster port=$port" '[pgbouncer]' 'listen_addr =' \
    "unix_socket_dir = $pool" 'listen_port = 6432' 'auth_type = trust' \
    "auth_file = $pool/users.txt" 'pool_mode = transaction' 'default_pool_size = 20' \
    'max_client_conn = 200' "logfile = $pool/pgbouncer.log" >"$pool/pgbouncer.ini"
  echo '"postgres" ""' >"$pool/users.txt"
  [[ ${#as_pg[@]} != 0 ]] && chown -R postgres "$pool"
  # setpriv execs it: the pid is pgbouncer's own, for the trap to stop.
  if [[ ${#as_pg[@]} != 0 ]]; then
    setpriv --reuid postgres --regid postgres --clear-groups "$pgbouncer" "$pool/pgbouncer.ini" >/dev/null 2>&1 &
  else
    "$pgbouncer" "$pool/pgbouncer.ini" >/dev/null 2>&1 &
  fi
  pooler_pid=$!
  for _ in $(seq 100); do [[ -S $pool/.s.PGSQL.6432 ]] && break; sleep 0.05; done
  [[ -S $pool/.s.PGSQL.6432 ]] || { cat "$pool/pgbouncer.log" >&2; echo "bench/pg.sh: pgbouncer did not start" >&2; exit 1; }
  pooler=(--pooler "$pool" --pooler-version "$("$pgbouncer" --version | head -n 1)")
fi
[[ -n $floor ]] && pooler+=(--floor "$floor")

python3 bench/pg.py $smoke --fp "$fp" --work "$work" --out "$out" --socket "$cluster" --port "$port" \
  --server-version "$version" --server-log "$cluster/server.log" "${pooler[@]}" "${tls[@]}"
