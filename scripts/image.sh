#!/usr/bin/env bash
# Builds the controller image offline, with the contents the Dockerfile's runtime stage has
# (the binary, the libraries it loads, CA certificates, the nonroot user 65532, OCI labels),
# into an OCI image layout with umoci (Debian's package). Docker cannot pull base images on
# machines without a registry; `docker build .` is the way everywhere else.
#
#   scripts/image.sh BINARY LAYOUT [TAG]     # e.g. target/release/karpenter image 0.1.0
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/image.sh BINARY LAYOUT [TAG]" >&2
  exit 2
fi
binary=$1 layout=$2 tag=${3:-0.1.0}
for tool in umoci objcopy ldd; do
  command -v "$tool" >/dev/null || { echo "scripts/image.sh needs $tool (apt-get install umoci binutils)" >&2; exit 1; }
done
[ -x "$binary" ] || { echo "scripts/image.sh: $binary is not an executable" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/home/nonroot" "$rootfs/tmp"
# Without debug information or symbols, as the Dockerfile builds it.
objcopy --strip-all "$binary" "$rootfs/karpenter"
# What distroless/cc carries: the C runtime the binary loads, at the paths it loads them.
for lib in $(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
  cp -L --parents "$lib" "$rootfs"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
chown 65532:65532 "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"

[ -f "$layout/index.json" ] || umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
rm -rf "$work/bundle/rootfs"
mv "$rootfs" "$work/bundle/rootfs"
umoci repack --image "$layout:$tag" "$work/bundle"
revision=$(git -C "$(dirname "$0")/.." rev-parse HEAD 2>/dev/null || echo unknown)
umoci config --image "$layout:$tag" \
  --config.user 65532:65532 \
  --config.workingdir / \
  --clear config.entrypoint --config.entrypoint /karpenter --config.entrypoint controller \
  --config.label org.opencontainers.image.title=karpenter-rs \
  --config.label org.opencontainers.image.version="$tag" \
  --config.label org.opencontainers.image.revision="$revision" \
  --config.label org.opencontainers.image.source= \
  --config.label org.opencontainers.image.licenses=Apache-2.0
umoci gc --layout "$layout"
echo "$layout:$tag"
