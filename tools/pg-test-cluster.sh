#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the test suite, listening on a Unix socket only.
#
#   tools/pg-test-cluster.sh start DIR   make a cluster in DIR (if new) and start it;
#                                        prints, for eval, the two variables the
#                                        PostgreSQL tests read: FENCEPOST_TEST_STORE
#                                        (the URL) and FENCEPOST_TEST_PGBIN (the
#                                        server's programs)
#   tools/pg-test-cluster.sh crash DIR   stop it the way a crash does (pg_ctl -m
#                                        immediate: no checkpoint, the next start
#                                        replays the WAL)
#   tools/pg-test-cluster.sh stop DIR    stop it if it runs and remove it (DIR too,
#                                        when nothing else is in it)
#   tools/pg-test-cluster.sh standby PRIMARY DIR
#                                        make DIR a streaming standby of the cluster
#                                        in PRIMARY (pg_basebackup -R; its
#                                        application_name, for synchronous_standby_names,
#                                        is fencepost_standby) and start it
#   tools/pg-test-cluster.sh promote DIR promote the standby in DIR to a primary
#
# The cluster lives in DIR/data, logs to DIR/log and puts its socket in DIR itself, so
# clusters in different folders never collide and none takes a TCP port. Authentication
# is trust (with no TCP port, only users of this machine who can reach DIR connect), the
# superuser is `postgres`, and the server keeps PostgreSQL's default durability (fsync
# on, synchronous_commit on). Run as root, the cluster belongs to the `postgres` user
# (the server refuses to run as root); run as anyone else, to that user. The programs
# come from FENCEPOST_TEST_PGBIN when it is set, else from `pg_config --bindir`, else
# from the newest /usr/lib/postgresql/*/bin.
#
# Two variables change where the server listens, for the partition tests (root only):
# FENCEPOST_TEST_PG_NETNS runs the server inside that network namespace, and
# FENCEPOST_TEST_PG_LISTEN makes it listen on TCP there (its listen_addresses), taking
# connections from the benchmarking range 198.18.0.0/15 with trust, as on the socket.
# FENCEPOST_TEST_PG_LISTEN works without the namespace too (the TLS tests listen on
# 127.0.0.1, which initdb's rules already trust); FENCEPOST_TEST_PG_PORT sets the port
# (default 5432), which also names the socket (DIR/.s.PGSQL.PORT): the printed URL says it.
set -euo pipefail

usage() {
  echo "usage: $0 start|crash|stop|promote DIR, or $0 standby PRIMARY DIR" >&2
  exit 2
}
primary=
if [ $# -eq 3 ] && [ "$1" = standby ]; then
  primary=$(cd "$2" && pwd -P)
  mkdir -p "$3"
  set -- "$1" "$3"
fi
[ $# -eq 2 ] || usage
action=$1
dir=$2

bindir() {
  if [ -n "${FENCEPOST_TEST_PGBIN:-}" ]; then
    echo "$FENCEPOST_TEST_PGBIN"
  elif command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir
  else
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$found" ] || {
      echo "$0: no PostgreSQL server programs (initdb) found; set FENCEPOST_TEST_PGBIN" >&2
      exit 1
    }
    echo "$found"
  fi
}
# The programs, checked when first needed (stopping a cluster that never started needs none).
programs() {
  bin=$(bindir)
  [ -x "$bin/initdb" ] || {
    echo "$0: $bin/initdb is missing" >&2
    exit 1
  }
}

# Runs a server program as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# The same, inside FENCEPOST_TEST_PG_NETNS when it is set.
as_owner_in_netns() {
  if [ -n "${FENCEPOST_TEST_PG_NETNS:-}" ]; then
    ip netns exec "$FENCEPOST_TEST_PG_NETNS" runuser -u postgres -- "$@"
  else
    as_owner "$@"
  fi
}

[ "$action" != start ] || mkdir -p "$dir"
[ -d "$dir" ] || {
  echo "$0: $dir: no such folder" >&2
  exit 1
}
dir=$(cd "$dir" && pwd -P)
# The server programs change to their own folders; the caller's may be closed to them.
cd /

start() {
  programs
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
    # Open to every user (the socket itself is), for tests that run fencepost as another.
    chmod 755 "$dir"
    as_owner "$bin/initdb" --pgdata="$dir/data" --username=postgres --auth=trust \
      --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      echo "$0: initdb failed in $dir/data" >&2
      exit 1
    }
  fi
  local listen=${FENCEPOST_TEST_PG_LISTEN:-}
  if [ -n "$listen" ] && ! grep -q '^host all all 198.18.0.0/15 trust' "$dir/data/pg_hba.conf"; then
    echo 'host all all 198.18.0.0/15 trust' >>"$dir/data/pg_hba.conf"
  fi
  local port=${FENCEPOST_TEST_PG_PORT:-5432}
  as_owner_in_netns "$bin/pg_ctl" start --pgdata="$dir/data" --log="$dir/log" --wait --silent \
    -o "-c listen_addresses='$listen' -c unix_socket_directories='$dir' -c port=$port" || {
    cat "$dir/log" >&2 || true
    echo "$0: the server in $dir/data did not start" >&2
    exit 1
  }
  # pg_ctl --wait returns once the postmaster answers; ask as a client would.
  "$bin/pg_isready" --quiet --host="$dir" --port="$port" --username=postgres --dbname=postgres \
    --timeout=30 || {
    cat "$dir/log" >&2 || true
    echo "$0: the server in $dir/data does not accept connections" >&2
    exit 1
  }
  local in_url=
  [ "$port" = 5432 ] || in_url="&port=$port"
  printf 'export FENCEPOST_TEST_STORE=%q\n' "postgresql:///postgres?host=$dir&user=postgres$in_url"
  printf 'export FENCEPOST_TEST_PGBIN=%q\n' "$bin"
}

# A copy of the primary's data taken over its replication connection, set up (-R:
# standby.signal and primary_conninfo) to stream from it; then started as any cluster.
standby() {
  programs
  [ -n "$primary" ] || usage
  [ ! -e "$dir/data" ] || {
    echo "$0: $dir/data exists already" >&2
    exit 1
  }
  [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
  chmod 755 "$dir"
  as_owner "$bin/pg_basebackup" --pgdata="$dir/data" --write-recovery-conf \
    --checkpoint=fast --wal-method=stream \
    --dbname="host=$primary user=postgres application_name=fencepost_standby" \
    >"$dir/basebackup.log" 2>&1 || {
    cat "$dir/basebackup.log" >&2
    echo "$0: pg_basebackup from $primary into $dir/data failed" >&2
    exit 1
  }
  start
}

running() {
  [ -f "$dir/data/postmaster.pid" ] || return 1
  programs
  as_owner "$bin/pg_ctl" status --pgdata="$dir/data" >/dev/null 2>&1
}

case $action in
  start) start ;;
  standby) standby ;;
  promote)
    programs
    as_owner "$bin/pg_ctl" promote --pgdata="$dir/data" --wait --silent ;;
  crash)
    programs
    as_owner "$bin/pg_ctl" stop --pgdata="$dir/data" --mode=immediate --wait --silent ;;
  stop)
    if running; then
      as_owner "$bin/pg_ctl" stop --pgdata="$dir/data" --mode=fast --wait --silent
    fi
    # Only what start made: a DIR that holds anything else is left in place.
    rm -rf -- "$dir/data" "$dir/log" "$dir/initdb.log" "$dir/basebackup.log" "$dir"/.s.PGSQL.*
    rmdir --ignore-fail-on-non-empty -- "$dir"
    ;;
  *) usage ;;
esac
