#!/usr/bin/env bash
# Writes tools/link-order.txt: the functions that the everyday commands run, for the
# linker to lay out side by side (`-Wl,--symbol-ordering-file`, rust-lld).
#
#   tools/link-order.sh BINARY     BINARY: the static release build bench/run.sh makes
#                                  (a dynamic one lists none of the C library)
#
# Each command is a fresh process, and the kernel pages its code in on first touch, 16
# pages around each fault. Left where the crates put them, the few hundred functions a
# write runs lie across the 4.6 MB of code (SQLite alone is 1 MB), and a write took 44
# page faults in code; laid out together they take about a third of that
# (bench/notes.md). The list is the functions valgrind's callgrind sees called by claim,
# write (from a file and from stdin), a refused write, renew, release, complete, status,
# run, log and --version, in a scratch folder, by symbol name, sorted; SHA-256's
# functions are added by name, as valgrind's CPU lacks the SHA extensions that the real
# one takes. Names that a later build no longer has are skipped by the linker
# (`--no-warn-symbol-ordering`): an old list costs speed, never correctness. Run it again
# after changes to the commands' paths; bench/run.sh prints how many listed functions
# the measured build has.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
fp=$(realpath "$1")
command -v valgrind >/dev/null || { echo "tools/link-order.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
out=$PWD/tools/link-order.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

n=0
profile() {
  n=$((n + 1))
  valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.$n" "$@" \
    >/dev/null 2>&1 || true
}
head -c 4096 /dev/urandom > in4k
"$fp" claim doc.md --owner w --ttl 1ms >/dev/null
for _ in 1 2; do
  profile "$fp" claim doc.md --owner w --ttl 1ms
  epoch=$("$fp" claim doc.md --owner w --ttl 1h)
  head -c 4096 /dev/urandom > in4k
  profile "$fp" -q write doc.md --epoch "$epoch" --from in4k
  head -c 4096 /dev/urandom | profile "$fp" -q write doc.md --epoch "$epoch"
  profile "$fp" -q write doc.md --epoch 1 --from in4k
  profile "$fp" renew doc.md --owner w --epoch "$epoch" --ttl 1h
  profile "$fp" release doc.md --owner w --epoch "$epoch"
done
epoch=$("$fp" claim doc.md --owner w --ttl 1h)
profile "$fp" complete doc.md --owner w --epoch "$epoch"
profile "$fp" status doc.md
profile "$fp" run doc.md --owner w --ttl 1m -- true
profile "$fp" log doc.md
profile "$fp" --version

{
  grep -h -E '^c?fn=\([0-9]+\) ' "$work"/cg.* | sed -E 's/^c?fn=\([0-9]+\) //'
  nm "$fp" | awk '{print $3}' | grep -E 'sha2|sha256' || true
} | sort -u > "$work/called"
nm "$fp" | awk 'NF == 3 {print $3}' | sort -u > "$work/symbols"
comm -12 "$work/called" "$work/symbols" > "$out"
echo "tools/link-order.sh: $(wc -l < "$out") functions in tools/link-order.txt"
