#!/bin/sh
# One contention worker: WRITES publishes of DOC, the fenced way or today's way.
#   worker.sh fence|flock ID WRITES ROOT DOC SRC OUT     ($FP: the fencepost binary)
# fence: claim (--wait) + write + release per publish, as a job script would.
# flock: flock(1) around cat > temp, sync temp, mv, sync folder.
# Appends "ID ok=N busy=N other=N codes=..." to OUT; busy counts exit-7 outcomes of
# any fencepost call, other counts every other failure (with its exit code).
mode=$1 id=$2 writes=$3 root=$4 doc=$5 src=$6 out=$7
cd "$root" || exit 1
i=0 ok=0 busy=0 other=0 codes=""
tally() {
    case $2 in
        0) return 0 ;;
        7) busy=$((busy + 1)) ;;
        *) other=$((other + 1)); codes="$codes $1:$2" ;;
    esac
    return 1
}
while [ "$i" -lt "$writes" ]; do
    i=$((i + 1))
    if [ "$mode" = fence ]; then
        epoch=$("$FP" claim "$doc" --owner "w$id" --ttl 60s --wait 300s)
        tally claim $? || continue
        "$FP" -q write "$doc" --epoch "$epoch" --owner "w$id" --from "$src"
        tally write $? && ok=$((ok + 1))
        "$FP" -q release "$doc" --owner "w$id" --epoch "$epoch"
        tally release $?
    else
        flock ".$doc.lock" sh -c 'cat "$1" > ".$2.tmp-$3" && sync ".$2.tmp-$3" && mv ".$2.tmp-$3" "$2" && sync .' \
            sh "$src" "$doc" "$id"
        tally flock $? && ok=$((ok + 1))
    fi
done
echo "$id ok=$ok busy=$busy other=$other codes=$codes" >>"$out"
