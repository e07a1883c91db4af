#!/bin/busybox sh
# PID 1 of the power-loss guest. Makes an ext4 filesystem on a log-writes device over
# /dev/vda (the log goes to /dev/vdb), then runs fencepost rounds on it and marks the log
# (with mode=direct, the filesystem is on /dev/vda itself and the marks go to the console):
#   fp:setup              the filesystem and the publish root exist and are synced
#   fp:try:EPOCH:SHA      a write of this content under this epoch is about to start
#   fp:ack:EPOCH:SHA      that write printed `written`
#   fp:seen:EPOCH:SHA     that write was killed after its COMMIT and `status` shows its
#                         content as the record and the document (readers see it)
#   fp:done:ACKS          every round ran; ACKS is how many ack and seen marks there are
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
now=0
acks=0
fp() {
    fencepost --root /mnt/pub --now "$now" "$@"
}
# The content of round $1 for epoch $2 in /tmp/content (a few bytes to a dozen KiB, so
# some versions span many blocks); its SHA-256 in $sha.
content() {
    n=$((($1 * 97 + $2 * 31) % 400 + 1))
    {
        echo "round $1 epoch $2"
        seq 1 "$n" | sed "s/^/round $1 epoch $2 line /"
    } >/tmp/content
    sha=$(sha256sum /tmp/content | cut -d' ' -f1)
}
# Claims for owner $1 after the previous lease expired; the epoch in $epoch.
claim() {
    now=$((now + 20))
    epoch=$(fp claim "$res" --owner "$1" --ttl 10) || fail "round $r: claim by $1"
}
# Writes /tmp/content as owner $1 with epoch $2, failpoints $3 (or none), and checks the
# exit code is $4.
write() {
    mark "fp:try:$2:$sha"
    rc=0
    if [ -n "$3" ]; then
        FAILPOINTS="$3" fencepost --root /mnt/pub --now "$now" write "$res" --epoch "$2" \
            --owner "$1" --from /tmp/content >/dev/null 2>&1 || rc=$?
    else
        fp write "$res" --epoch "$2" --owner "$1" --from /tmp/content >/dev/null || rc=$?
    fi
    [ "$rc" = "$4" ] || fail "round $r: write by $1 at epoch $2 exited $rc, wanted $4"
}
ack() {
    mark "fp:$1:$2:$sha"
    acks=$((acks + 1))
}
complete() {
    fp complete "$res" --owner "$1" --epoch "$2" --result ok >/dev/null ||
        fail "round $r: complete by $1"
}

r=1
while [ "$r" -le "$rounds" ]; do
    a=w$((r % 2))
    b=w$(((r + 1) % 2))
    case $((r % 5)) in
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
    0) # killed with its links made, before the rename; recovered, then written
        claim "$a"
        content "$r" "$epoch"
        write "$a" "$epoch" "write.after_new_link=return(abort)" 134
        fp recover >/dev/null || fail "round $r: recover"
        write "$a" "$epoch" "" 0
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
