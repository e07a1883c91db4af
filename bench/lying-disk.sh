#!/usr/bin/env bash
# The power-loss test's random mode (tools/powerloss, docs/crash-safety.md): a guest whose
# only disk is an NBD export served by nbdkit's cache filter in writeback mode, which
# keeps writes until the guest flushes; nbdkit is SIGKILLed at a random moment of a random
# round, and the file behind it is mounted, recovered and judged. One boot per cut, so
# slow (tens of seconds each under software emulation); not part of CI.
#
#   bench/lying-disk.sh [CUTS] [SEED]    default 20 cuts and a random seed; run as root
#
# Installs qemu-system-x86, busybox-static, dmsetup, e2fsprogs and nbdkit if missing,
# fetches the guest's kernel, builds fencepost with failpoints and the tool, then runs
# it. Exit 9 when a cut lost or corrupted an acknowledged write (the disk images are then
# kept); the seed is printed, and passing it again picks the same rounds and delays (the
# guest's own timing still varies).
set -euo pipefail
cd "$(dirname "$0")/.."
cuts=${1:-20}
seed=${2:-}

missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
command -v dmsetup >/dev/null 2>&1 || missing+=(dmsetup)
command -v mke2fs >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v nbdkit >/dev/null 2>&1 || missing+=(nbdkit)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/lying-disk.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
tools/powerloss/fetch-kernel.sh target/powerloss-kernel
cargo build --locked --features fencepost/failpoints -p fencepost -p fencepost-powerloss
target=${CARGO_TARGET_DIR:-target}
keep=$(mktemp -d "${BENCH_DIR:-/dev/shm}/lying-disk.XXXXXX")
rc=0
"$target/debug/fencepost-powerloss" --fencepost "$target/debug/fencepost" \
  --kernel target/powerloss-kernel --keep "$keep" --lying-disk "$cuts" ${seed:+--seed "$seed"} || rc=$?
if [ "$rc" -eq 0 ]; then
  rm -rf "$keep"
else
  echo "bench/lying-disk.sh: the images, the initramfs and any violating disk are in $keep" >&2
fi
exit "$rc"
