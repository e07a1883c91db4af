#!/bin/busybox sh
# PID 1 of the power-loss guest. Makes an ext4 filesystem on a log-writes device over
# /dev/vda (the log goes to /dev/vdb), then runs fencepost rounds on it and marks the log
# (with mode=direct, the filesystem is on /dev/vda itself and the marks go to the console):
#   fp:setup                  the filesystem and the publish root exist and are synced
#   fp:try:EPOCH:SEQ:SHA      a write of this content as this version (epoch, seq; seq 0
#                             without --seq) is about to start; SHA `removed`: a removal
#   fp:ack:EPOCH:SEQ:SHA      that write printed `written` (a removal: `removed`)
#   fp:seen:EPOCH:SEQ:SHA     that write was killed after its COMMIT and `status` shows its
#                             content as the record and the document (a removal: the
#                             tombstone, and no document): readers see it
#   fp:tree:try|ack|seen:EPOCH:SEQ:SHA
#                             the same for a publish of the tree (write --tree); SHA is the
#                             tree hash: the SHA-256 of its manifest, computed here
#   fp:done:ACKS              every round ran; ACKS is how many ack and seen marks there are
# A mark is logged after everything already flushed, so it follows the write it reports.
# Lines starting with "powerloss-guest:" on the console tell the host how it went.

/bin/busybox --install -s /bin
export PATH=/sbin:/bin
. /powerloss.env

fail() {
    echo "powerloss-guest: FAILED: $*"
    reboot -f
}

mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs devtmpfs /dev ||
    fail "cannot mount /proc, /sys and /dev"
for m in $modules; do
    insmod "/modules/$m.ko" || fail "insmod $m"
done
if [ "$mode" = log ]; then
    [ -b /dev/vda ] && [ -b /dev/vdb ] || fail "the virtio disks did not appear"
    dmsetup create lw --table "0 $(blockdev --getsz /dev/vda) log-writes /dev/vda /dev/vdb" ||
        fail "dmsetup create"
    disk=/dev/dm-0
    mark() {
        dmsetup message lw 0 mark "$1" || fail "mark $1"
    }
else
    # The disk itself may lose power at any moment: the marks go to the console, which
    # the host reads up to the moment it cut the power.
    [ -b /dev/vda ] || fail "the virtio disk did not appear"
    disk=/dev/vda
    mark() {
        echo "powerloss-mark: $1"
    }
fi
/sbin/mke2fs -t ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$disk" ||
    fail "mke2fs"
mount -t ext4 "$disk" /mnt || fail "mount"
mkdir /mnt/pub && sync || fail "mkdir"
mark fp:setup
echo "powerloss-guest: filesystem ready at $(cut -d' ' -f1 /proc/uptime) s"

res=reports/daily.md
tres=reports/site
now=0
acks=0
fp() {
    fencepost --root /mnt/pub --now "$now" "$@"
}
# The content of round $1 for epoch $2 (and seq $3, 0 if not given) in /tmp/content (a
# few bytes to a dozen KiB, so some versions span many blocks); its SHA-256 in $sha.
content() {
    s=${3:-0}
    n=$((($1 * 97 + $2 * 31 + s * 53) % 400 + 1))
    {
        echo "round $1 epoch $2 seq $s"
        seq 1 "$n" | sed "s/^/round $1 epoch $2 seq $s line /"
    } >/tmp/content
    sha=$(sha256sum /tmp/content | cut -d' ' -f1)
}
# The manifest of the folder $1 as fencepost hashes a tree: one `KIND MODE SIZE SHA256
# PATH` line per entry, the top folder as `.`, sorted by path (the trees here hold
# folders and files named with letters and digits only, so a plain sort is fencepost's
# order, component by component, and no name needs escaping).
manifest() {
    (
        cd "$1" || exit 1
        find . | sed 's|^\./||' | sort | while read -r p; do
            m=$(printf '%04d' "$(stat -c %a "$p")")
            if [ -d "$p" ]; then
                echo "d $m 0 - $p"
            else
                echo "f $m $(stat -c %s "$p") $(sha256sum <"$p" | cut -d' ' -f1) $p"
            fi
        done
    )
}
# The tree of round $1 for epoch $2 and seq $3 in /tmp/tree: an index, a subfolder of two
# to six files of a few bytes to a dozen KiB (the first readable by its owner only), and
# an empty folder whose name changes with the version; its tree hash in $sha.
tree_content() {
    rm -rf /tmp/tree
    mkdir /tmp/tree /tmp/tree/sub "/tmp/tree/empty$((($1 + $2 + $3) % 3))" ||
        fail "round $1: cannot make the tree"
    echo "round $1 epoch $2 seq $3" >/tmp/tree/index
    k=$((($1 * 7 + $2 * 3 + $3) % 5 + 2))
    i=1
    while [ "$i" -le "$k" ]; do
        n=$((($1 * 97 + $2 * 31 + $3 * 53 + i * 41) % 300 + 1))
        seq 1 "$n" | sed "s/^/round $1 epoch $2 seq $3 file $i line /" >"/tmp/tree/sub/page$i"
        i=$((i + 1))
    done
    chmod 0755 /tmp/tree /tmp/tree/sub /tmp/tree/empty*
    chmod 0644 /tmp/tree/index /tmp/tree/sub/page*
    chmod 0600 /tmp/tree/sub/page1
    sha=$(manifest /tmp/tree | sha256sum | cut -d' ' -f1)
}
# Claims $2 (the document without it) for owner $1 after the previous lease expired; the
# epoch in $epoch.
claim() {
    now=$((now + 20))
    epoch=$(fp claim "${2:-$res}" --owner "$1" --ttl 10) || fail "round $r: claim by $1"
}
# Writes /tmp/content as owner $1 with epoch $2, failpoints $3 (or none), and checks the
# exit code is $4; with $5, as that seq (--seq).
write() {
    seqno=${5:-0}
    version="--epoch $2"
    [ "$seqno" = 0 ] || version="$version --seq $seqno"
    mark "fp:try:$2:$seqno:$sha"
    rc=0
    if [ -n "$3" ]; then
        # $version unquoted: two or four words.
        FAILPOINTS="$3" fencepost --root /mnt/pub --now "$now" write "$res" $version \
            --owner "$1" --from /tmp/content >/dev/null 2>&1 || rc=$?
    else
        fp write "$res" $version --owner "$1" --from /tmp/content >/dev/null || rc=$?
    fi
    [ "$rc" = "$4" ] || fail "round $r: write by $1 at epoch $2 seq $seqno exited $rc, wanted $4"
}
# Removes the document as owner $1 with epoch $2 and seq $3, failpoints $4 (or none), and
# checks the exit code is $5. Its SHA, for the marks, is `removed`.
remove() {
    seqno=$3
    sha=removed
    mark "fp:try:$2:$seqno:$sha"
    rc=0
    if [ -n "$4" ]; then
        FAILPOINTS="$4" fencepost --root /mnt/pub --now "$now" remove "$res" --epoch "$2" \
            --seq "$seqno" --owner "$1" >/dev/null 2>&1 || rc=$?
    else
        fp remove "$res" --epoch "$2" --seq "$seqno" --owner "$1" >/dev/null || rc=$?
    fi
    [ "$rc" = "$5" ] || fail "round $r: removal by $1 at epoch $2 seq $seqno exited $rc, wanted $5"
}
# Publishes /tmp/tree as the tree as owner $1 with epoch $2, failpoints $3 (or none), and
# checks the exit code is $4; with $5, as that seq (--seq).
publish() {
    seqno=${5:-0}
    version="--epoch $2"
    [ "$seqno" = 0 ] || version="$version --seq $seqno"
    mark "fp:tree:try:$2:$seqno:$sha"
    rc=0
    if [ -n "$3" ]; then
        FAILPOINTS="$3" fencepost --root /mnt/pub --now "$now" write "$tres" $version \
            --owner "$1" --tree /tmp/tree </dev/null >/dev/null 2>&1 || rc=$?
    else
        fp write "$tres" $version --owner "$1" --tree /tmp/tree </dev/null >/dev/null || rc=$?
    fi
    [ "$rc" = "$4" ] || fail "round $r: tree publish by $1 at epoch $2 seq $seqno exited $rc, wanted $4"
}
# Marks the last write or removal (its epoch $2, its $seqno and $sha) as $1 (ack or seen).
ack() {
    mark "fp:$1:$2:$seqno:$sha"
    acks=$((acks + 1))
}
# The same for the last tree publish.
tree_ack() {
    mark "fp:tree:$1:$2:$seqno:$sha"
    acks=$((acks + 1))
}
# Completes $3 (the document without it) as owner $1 with epoch $2.
complete() {
    fp complete "${3:-$res}" --owner "$1" --epoch "$2" --result ok >/dev/null ||
        fail "round $r: complete by $1"
}

r=1
while [ "$r" -le "$rounds" ]; do
    a=w$((r % 2))
    b=w$(((r + 1) % 2))
    case $((r % 10)) in
    1) # a plain round
        claim "$a"
        content "$r" "$epoch"
        write "$a" "$epoch" "" 0
        ack ack "$epoch"
        complete "$a" "$epoch"
        ;;
    2) # killed right after its COMMIT: the recovery links stay behind
        claim "$a"
        content "$r" "$epoch"
        write "$a" "$epoch" "txn.after_commit=return(abort)" 134
        [ "$(fp status "$res" --json | grep -o "$sha" | wc -l)" = 2 ] ||
            fail "round $r: status does not show the committed write"
        ack seen "$epoch"
        ;;
    3) # a takeover: a's lease expires before it writes; b writes; a's late write is stale
        claim "$a"
        late=$epoch
        claim "$b"
        content "$r" "$epoch"
        write "$b" "$epoch" "" 0
        ack ack "$epoch"
        complete "$b" "$epoch"
        content "$r" "$late"
        write "$a" "$late" "" 5
        ;;
    4) # killed after the rename and the folder fsync, before COMMIT: rolled back later
        claim "$a"
        content "$r" "$epoch"
        write "$a" "$epoch" "write.after_dir_fsync=return(abort)" 134
        ;;
    5) # killed with its links made, before the rename; recovered, then written
        claim "$a"
        content "$r" "$epoch"
        write "$a" "$epoch" "write.after_new_link=return(abort)" 134
        fp recover >/dev/null || fail "round $r: recover"
        write "$a" "$epoch" "" 0
        ack ack "$epoch"
        complete "$a" "$epoch"
        ;;
    6) # versions of one lease: seq 1, then seq 2 over it; then a removal (seq 3) killed
        # right after its COMMIT, its -gone file left behind
        claim "$a"
        content "$r" "$epoch" 1
        write "$a" "$epoch" "" 0 1
        ack ack "$epoch"
        content "$r" "$epoch" 2
        write "$a" "$epoch" "" 0 2
        ack ack "$epoch"
        remove "$a" "$epoch" 3 "txn.after_commit=return(abort)" 134
        st=$(fp status "$res" --json) || fail "round $r: status"
        echo "$st" | grep -q '"state":"removed"' && echo "$st" | grep -q '"removed":true' ||
            fail "round $r: status does not show the committed removal: $st"
        ack seen "$epoch"
        ;;
    7) # a tree publish killed after its swap and the folder fsync, before COMMIT (the
        # first one at the name, the first time); a takeover's claim undoes it, and the
        # takeover publishes its own tree
        claim "$a" "$tres"
        tree_content "$r" "$epoch" 0
        publish "$a" "$epoch" "tree.after_dir_fsync=return(abort)" 134
        claim "$b" "$tres"
        tree_content "$r" "$epoch" 0
        publish "$b" "$epoch" "" 0
        tree_ack ack "$epoch"
        complete "$b" "$epoch" "$tres"
        ;;
    8) # trees of one lease: seq 1, then seq 2 replacing it
        claim "$a" "$tres"
        tree_content "$r" "$epoch" 1
        publish "$a" "$epoch" "" 0 1
        tree_ack ack "$epoch"
        tree_content "$r" "$epoch" 2
        publish "$a" "$epoch" "" 0 2
        tree_ack ack "$epoch"
        complete "$a" "$epoch" "$tres"
        ;;
    9) # a tree publish killed right after its COMMIT: its marker and the old tree stay
        claim "$a" "$tres"
        tree_content "$r" "$epoch" 0
        publish "$a" "$epoch" "txn.after_commit=return(abort)" 134
        [ "$(fp status "$tres" --json | grep -o "$sha" | wc -l)" = 2 ] ||
            fail "round $r: status does not show the committed tree"
        tree_ack seen "$epoch"
        ;;
    0) # a removal killed after its rename and the folder fsync, before COMMIT (the next
        # removal's recovery puts the document back), then removed for good
        claim "$a"
        content "$r" "$epoch" 1
        write "$a" "$epoch" "" 0 1
        ack ack "$epoch"
        remove "$a" "$epoch" 2 "remove.after_dir_fsync=return(abort)" 134
        remove "$a" "$epoch" 2 "" 0
        ack ack "$epoch"
        complete "$a" "$epoch"
        ;;
    esac
    echo "powerloss-guest: round $r done at $(cut -d' ' -f1 /proc/uptime) s"
    r=$((r + 1))
done
mark "fp:done:$acks"
umount /mnt || fail "umount"
[ "$mode" != log ] || dmsetup remove lw || fail "dmsetup remove"
sync
echo "powerloss-guest: done"
reboot -f
