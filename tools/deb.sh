#!/usr/bin/env bash
# Builds fencepost's Debian package with cargo deb, and prints its path:
#
#   tools/deb.sh                                   # target/debian/fencepost_<version>-1_<arch>.deb
#   apt install ./target/debian/fencepost_*.deb
#
# The package (Cargo.toml, [package.metadata.deb]) holds /usr/bin/fencepost (the release
# build: `cargo build --release --locked`), the man pages and the bash, zsh and fish
# completions that this binary writes here (into target/release/package/), the systemd
# units of dist/systemd/ and the docs. Installs cargo-deb (cargo install cargo-deb
# --locked) when it is missing. Progress goes to stderr; stdout is the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
  "") ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "tools/deb.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
esac

if ! cargo deb --version >/dev/null 2>&1; then
  echo "tools/deb.sh: installing cargo-deb" >&2
  cargo install cargo-deb --locked >&2
fi

cargo build --release --locked -p fencepost --bin fencepost >&2
target=${CARGO_TARGET_DIR:-target}
bin=$target/release/fencepost
# What the package's assets list under target/release/package/, made by the binary it
# ships (man pages gzipped here: cargo deb compresses only those it does not take for
# build products).
generated=$target/release/package
rm -rf "$generated"
mkdir -p "$generated/completions"
"$bin" man --dir "$generated/man" >/dev/null
gzip -9n "$generated"/man/man1/*.1
"$bin" completions bash >"$generated/completions/fencepost"
"$bin" completions zsh >"$generated/completions/_fencepost"
"$bin" completions fish >"$generated/completions/fencepost.fish"

# --no-build: the binary above is the one packaged (cargo deb would build it again with
# its own flags). cargo deb prints the package's path on stdout.
deb=$(cargo deb --no-build --locked -p fencepost)
# Relative to the checkout when it is inside it, as `apt install ./...` wants it.
echo "${deb#"$PWD"/}"
