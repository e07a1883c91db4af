#!/usr/bin/env bash
# Fetches the kernel the power-loss test boots: Debian's current cloud kernel package
# (linux-image-*-cloud-amd64, which ships the dm-log-writes module), downloaded with
# apt-get and unpacked with dpkg-deb into DIR (default target/powerloss-kernel). Nothing
# is installed on this machine. Does nothing when DIR already holds that version.
set -euo pipefail
dest=${1:-target/powerloss-kernel}

package() {
  apt-cache depends linux-image-cloud-amd64 2>/dev/null |
    awk '/Depends: linux-image-/ { print $2; exit }'
}
pkg=$(package)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(package)
fi
if [ -z "$pkg" ]; then
  echo "fetch-kernel: apt knows no linux-image-cloud-amd64 (is this Debian on amd64?)" >&2
  exit 1
fi
if [ -f "$dest/.package" ] && [ "$(cat "$dest/.package")" = "$pkg" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download drops privileges to _apt, which must be able to write here.
chmod 0777 "$tmp"
if ! (cd "$tmp" && apt-get download -qq "$pkg"); then
  apt-get update -qq
  (cd "$tmp" && apt-get download -qq "$pkg")
fi
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x "$tmp"/*.deb "$dest"
echo "$pkg" >"$dest/.package"
echo "fetch-kernel: $pkg unpacked in $dest"
