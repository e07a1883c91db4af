#!/bin/sh
# WORKERS concurrent workers, each making WRITES publishes, then wait for all.
#   contend.sh fence|flock distinct|one WORKERS WRITES ROOT SRC OUT
# distinct: worker N publishes docN.md; one: all publish doc.md, in turn.
mode=$1 share=$2 workers=$3 writes=$4 root=$5 src=$6 out=$7
here=$(dirname "$0")
w=0
while [ "$w" -lt "$workers" ]; do
    if [ "$share" = one ]; then doc=doc.md; else doc=doc$w.md; fi
    sh "$here/worker.sh" "$mode" "$w" "$writes" "$root" "$doc" "$src" "$out" &
    w=$((w + 1))
done
wait
