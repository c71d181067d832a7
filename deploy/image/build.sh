#!/usr/bin/env bash
# build.sh [OUT]: gated's container image, written as an OCI archive to OUT
# (default bin/gated-image.tar). It needs Go and Debian's buildah, and
# nothing from a registry: the image starts from scratch and holds
#
#   /usr/bin/gated                      static (CGO_ENABLED=0, -trimpath), version and revision stamped;
#                                       the bundled sop and llm reviewers run from it (gated plugin run)
#   /etc/passwd, /etc/group             the user gated, 65532:65532, and root
#   /etc/ssl/certs/ca-certificates.crt  the build machine's CA bundle: the llm reviewer's providers
#                                       and NATS servers over TLS are verified with it
#   /data                               the data directory (GATED_DATA_DIR), owned by gated: a volume
#   /tmp                                empty: a volume (or tmpfs) under a read-only root, where the
#                                       plugin host and its plugins make their sockets
#
# and nothing else: no shell, no package manager. The binary is built from
# a clone of the commit HEAD names, the revision the image is labelled
# with: uncommitted changes are not in it (it says so when there are
# some), and Go stamps the revision into the binary (go version -m), which
# it cannot do in a linked git worktree. VERSION (default: git describe)
# and SOURCE_DATE_EPOCH (default: the commit's time, so a rebuild of a
# commit gives the same created date) may be set.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bin/gated-image.tar}
GO=${GO:-go}
command -v buildah >/dev/null || { echo "make image needs buildah: apt-get install buildah" >&2; exit 1; }
ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca" ] || { echo "make image needs the CA bundle $ca: apt-get install ca-certificates" >&2; exit 1; }

revision=$(git rev-parse HEAD)
version=${VERSION:-$(git describe --tags --always 2>/dev/null || echo dev)}
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "make image: uncommitted changes are not in the image, built from $revision" >&2
fi
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
uid=65532

work=$(mktemp -d)
trap 'buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/data" "$root/tmp"

git clone --quiet --shared --no-checkout . "$work/src"
git -C "$work/src" checkout --quiet "$revision"
(cd "$work/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=true "$GO" build -trimpath \
  -ldflags "-s -w -X main.version=$version" -o "$root/usr/bin/gated" ./cmd/gated)
printf 'root:x:0:0:root:/root:/nonexistent\ngated:x:%d:%d:gated:/data:/nonexistent\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\ngated:x:%d:\n' $uid >"$root/etc/group"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0755 "$root/usr/bin/gated"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0700 "$root/data"
chmod 1777 "$root/tmp"
chown -R 0:0 "$root"
chown $uid:$uid "$root/data"

b=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
c=$("${b[@]}" from scratch)
# One layer, from a tar that keeps the owners and modes set above (buildah
# copy would make every file root's).
tar --numeric-owner --sort=name --mtime="@$epoch" -C "$root" -cf "$work/rootfs.tar" .
"${b[@]}" add "$c" "$work/rootfs.tar" / >/dev/null
"${b[@]}" config \
  --user "$uid:$uid" \
  --entrypoint '["/usr/bin/gated"]' \
  --cmd '["serve", "--http", ":8080"]' \
  --env GATED_DATA_DIR=/data \
  --workingdir /data \
  --volume /data --volume /tmp \
  --port 8080/tcp \
  --label org.opencontainers.image.title=gated \
  --label "org.opencontainers.image.description=A policy gate for the actions of AI agents, on NATS" \
  --label org.opencontainers.image.source=https://github.com/gated/gated \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.created=$created" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$c"
mkdir -p "$(dirname "$out")"
rm -f "$out"
"${b[@]}" commit --quiet --format oci --timestamp "$epoch" --rm "$c" "oci-archive:$out:gated:$version" >/dev/null
echo "image gated:$version ($revision) written to $out"
