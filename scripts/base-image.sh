#!/usr/bin/env bash
# Make the base image for `ecotone build` from nothing, for machines without a registry:
# Debian (minbase) with its python3, made with debootstrap and imported into every container
# engine that answers, as localhost/ecotone-base:bookworm.
#
#   sudo make base-image          # or: sudo scripts/base-image.sh
#
# Needs root (debootstrap) and the debootstrap package; fetches from a Debian mirror (the
# default one, or $DEBIAN_MIRROR). The root file system is cached as a tar file under
# ${XDG_CACHE_HOME:-$HOME/.cache}/ecotone/, so later runs (another engine, a fresh engine) only
# import it. An engine that already has the image is left alone (FORCE=1 imports again).
#
# Engines: podman through $CONTAINER_HOST when set (the API service), else the local podman;
# docker through $DOCKER_HOST or its default socket. One that is not installed or not up is
# skipped, and said so. Exit status 1 if no engine got the image.
#
# Settings (environment): SUITE (bookworm), IMAGE (localhost/ecotone-base:$SUITE),
# DEBIAN_MIRROR (debootstrap's default), FORCE.
set -euo pipefail
suite=${SUITE:-bookworm}
image=${IMAGE:-localhost/ecotone-base:$suite}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ecotone
tarball=$cache/rootfs-$suite.tar
say() { echo "base-image: $*" >&2; }

make_tarball() {
  if [ "$(id -u)" != 0 ]; then
    say "debootstrap needs root: run \`sudo make base-image\` (or put $tarball there)"
    exit 1
  fi
  command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  mkdir -p "$cache"
  local rootfs
  rootfs=$(mktemp -d "$cache/rootfs-$suite.XXXXXX")
  chmod 755 "$rootfs" # it becomes the image's /: mktemp made it private
  trap 'rm -rf "$rootfs" "$tarball.tmp"' EXIT
  say "debootstrap --variant=minbase --include=python3 $suite (about a minute)"
  local started=$SECONDS
  debootstrap --variant=minbase --include=python3 "$suite" "$rootfs" ${DEBIAN_MIRROR:-} \
    >"$cache/debootstrap-$suite.log" 2>&1 \
    || { say "debootstrap failed; the end of $cache/debootstrap-$suite.log:"; tail -15 "$cache/debootstrap-$suite.log" >&2; exit 1; }
  # No package caches, lists, docs, man pages or locales: nothing in the image installs packages.
  tar -C "$rootfs" --exclude=./var/cache/apt --exclude=./var/lib/apt/lists \
    --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale \
    -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$rootfs"
  trap - EXIT
  say "$tarball made in $((SECONDS - started)) s ($(du -h "$tarball" | cut -f1))"
}

[ -s "$tarball" ] && say "using cached $tarball" || make_tarball

# The Python inside, for images built on this one (ecotone.images reads PYTHON_VERSION).
python=$(tar -tf "$tarball" | sed -n 's#^\./usr/bin/python\([0-9]*\.[0-9]*\)$#\1#p' | head -1)
[ -n "$python" ] || { say "$tarball has no /usr/bin/python3.X: not a base for ecotone"; exit 1; }
changes=(
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  --change "ENV LANG=C.UTF-8"
  --change "ENV PYTHON_VERSION=$python"
  --change 'CMD ["python3"]'
)

imported=0
import_into() {  # engine-name command...
  local name=$1
  shift
  if ! command -v "$1" >/dev/null; then
    say "$name: not installed, skipped"
    return
  fi
  if ! "$@" info >/dev/null 2>&1; then
    say "$name: not reachable ($* info failed), skipped"
    return
  fi
  if [ -z "${FORCE:-}" ] && "$@" image inspect "$image" >/dev/null 2>&1; then
    say "$name: has $image already"
    imported=$((imported + 1))
    return
  fi
  "$@" import "${changes[@]}" "$tarball" "$image" >/dev/null
  say "$name: imported $image (Python $python)"
  imported=$((imported + 1))
}

if [ -n "${CONTAINER_HOST:-}" ]; then
  import_into podman podman --remote
else
  import_into podman podman
fi
import_into docker docker

[ "$imported" -gt 0 ] || { say "no container engine took the image (start podman or dockerd)"; exit 1; }
