#!/usr/bin/env bash
# Puts the libmetis example meshes (mdual, copter2, 4elt) under benchmarks/graphs/ (not committed).
set -euo pipefail
dest="$(cd "$(dirname "$0")" && pwd)/graphs"
mkdir -p "$dest"
tmp=$(mktemp -d)
( cd "$tmp" && apt-get download libmetis-doc >/dev/null && dpkg -x libmetis-doc_*.deb x )
cp "$tmp"/x/usr/share/doc/libmetis-dev/examples/graphs/{mdual,copter2,4elt}.graph "$dest/"
rm -rf "$tmp"
ls -la "$dest"
