#!/usr/bin/env bash
# fencepost benchmarks: every comparison side by side, one table.
#
#   bench/run.sh            full run (about 15 minutes), writes bench/RESULTS.md
#   bench/run.sh --smoke    tiny sizes and few runs (CI), writes bench/RESULTS.smoke.md
#
# Builds the release binary twice: statically linked (glibc's crt-static, non-PIE, for the
# host triple, functions laid out by tools/link-order.txt), which the command rows measure,
# and the default dynamically linked build, which row 1c compares with it; rows 8a-8b run
# examples/bench_api.rs (the library, timed within one process) from the default build.
# Installs hyperfine / time / strace / flock / gcc / rsync with apt-get if missing,
# compiles the floor program (bench/floor.c) and the lock-timing shim (bench/lockhold.c)
# into target/bench/, then runs bench/bench.py. Scratch files go to a fresh folder under
# $BENCH_DIR (default bench/.work), removed at the end; its filesystem is the one measured.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=""
for arg in "$@"; do
  case $arg in
    --smoke) smoke=--smoke ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

missing=()
command -v hyperfine >/dev/null 2>&1 || missing+=(hyperfine)
[ -x /usr/bin/time ] || missing+=(time)
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v flock >/dev/null 2>&1 || missing+=(util-linux)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/run.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The binary, the program rows 8a-8b run (examples/bench_api.rs, using the library) and
# row P5's floor (examples/bench_pg_floor.rs, one plain PostgreSQL transaction a process).
cargo build --release --locked --bins --example bench_api --example bench_pg_floor
target=${CARGO_TARGET_DIR:-target}
host=$(rustc -vV | sed -n 's/^host: //p')
# The static build: a process starts about 0.5 ms sooner without the dynamic loader, and
# a little sooner again when it need not relocate itself (non-PIE: no page of the binary
# is rewritten at start-up; bench/notes.md). --target keeps the flags off build scripts
# and proc macros. rust-lld (Rust's default linker on x86_64 Linux) lays out the functions
# that tools/link-order.txt lists side by side, so a command pages in its code with fewer
# faults (tools/link-order.sh).
order=$PWD/tools/link-order.txt
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static \
  -C link-arg=-Wl,--symbol-ordering-file=$order -C link-arg=-Wl,--no-warn-symbol-ordering" \
  cargo build --release --locked --target "$host"
listed=$(wc -l < "$order")
found=$(nm "$target/$host/release/fencepost" | awk 'NF == 3 {print $3}' | sort -u \
  | comm -12 - <(sort -u "$order") | wc -l)
mkdir -p "$target/bench"
gcc -O2 -Wall -Wextra -o "$target/bench/floor" bench/floor.c
gcc -O2 -Wall -Wextra -o "$target/bench/spawntime" bench/spawntime.c
gcc -O2 -Wall -Wextra -shared -fPIC -o "$target/bench/lockhold.so" bench/lockhold.c -ldl

base=${BENCH_DIR:-bench/.work}
mkdir -p "$base"
work=$(mktemp -d "$base/run.XXXXXX")
trap 'rm -rf "$work"' EXIT

out=bench/RESULTS.md
[ -n "$smoke" ] && out=bench/RESULTS.smoke.md
python3 bench/bench.py $smoke --fp "$target/$host/release/fencepost" \
  --fp-dynamic "$target/release/fencepost" --floor "$target/bench/floor" \
  --spawntime "$target/bench/spawntime" --api "$target/release/examples/bench_api" \
  --shim "$target/bench/lockhold.so" --work "$work" --out "$out" --link-order "$found/$listed"
# The PostgreSQL rows, appended as a section of their own: bench/pg.sh starts a private
# cluster (and stops it), or says "skipped" without the server binaries.
bash bench/pg.sh $smoke --fp "$target/$host/release/fencepost" --work "$work" --out "$out" \
  --floor "$target/release/examples/bench_pg_floor"
echo "bench/run.sh: wrote $out" >&2
