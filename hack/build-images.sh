#!/usr/bin/env bash
# Builds Proctor's container images as docker-archive tarballs with Go alone,
# no Docker and no registry (hack/image writes them):
#
#   proctor.tar  ghcr.io/proctor-dev/proctor:$IMAGE_TAG          /proctor, the manager and runner
#   fakellm.tar  ghcr.io/proctor-dev/proctor-fakellm:$IMAGE_TAG  /fakellm, the fake model API
#   pause.tar    localhost/pause:3.10                            /pause, the pod sandbox
#   busybox.tar  docker.io/library/busybox:1.35.0                the host's static busybox
#   postgres.tar ghcr.io/proctor-dev/proctor-postgres:$IMAGE_TAG the host's PostgreSQL (Debian's
#                                                                 packages) with the libraries it
#                                                                 loads, and the static busybox
#   seaweedfs.tar ghcr.io/proctor-dev/proctor-seaweedfs:$IMAGE_TAG SeaweedFS's weed (bin/weed, make
#                                                                 seaweedfs): the local cluster's
#                                                                 results store (config/seaweedfs)
#   kueue.tar    registry.k8s.io/kueue/kueue:$KUEUE_VERSION     Kueue's controller ($KUEUE, make kueue), as
#                                                                 its Dockerfile lays it out; only when KUEUE
#                                                                 is set (make e2e: the Kueue e2e installs it)
#
# Load one into containerd with: ctr -n k8s.io images import bin/images/proctor.tar
#
# Usage: hack/build-images.sh [out-dir]   (default bin/images)
# Environment: IMAGE_TAG (v0.1.0), VERSION (git describe, as in the Makefile),
# PROCTOR_IMAGE, FAKELLM_IMAGE, PAUSE_IMAGE, BUSYBOX_IMAGE, POSTGRES_IMAGE, SEAWEEDFS_IMAGE (the references),
# WEED (bin/weed), KUEUE (none: no Kueue image), KUEUE_VERSION (v0.17.0),
# GOARCH (the Go toolchain's), BUSYBOX (/usr/bin/busybox), CA_BUNDLE
# (/etc/ssl/certs/ca-certificates.crt), SOURCE_DATE_EPOCH (every timestamp; 0).
#
# An image is rebuilt only when the hash of its inputs (binaries, CA bundle,
# builder, flags) differs from the stamp beside its tarball. The Dockerfile
# builds the same proctor image with Docker.
set -euo pipefail

die() { echo "build-images: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/bin/images}
mkdir -p "$OUT" || die "cannot create the output directory $OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=$OUT/.build

command -v go >/dev/null || die "go is not on PATH"
IMAGE_TAG=${IMAGE_TAG:-v0.1.0}
VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
PROCTOR_IMAGE=${PROCTOR_IMAGE:-ghcr.io/proctor-dev/proctor:$IMAGE_TAG}
FAKELLM_IMAGE=${FAKELLM_IMAGE:-ghcr.io/proctor-dev/proctor-fakellm:$IMAGE_TAG}
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/pause:3.10}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-docker.io/library/busybox:1.35.0}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-ghcr.io/proctor-dev/proctor-postgres:$IMAGE_TAG}
SEAWEEDFS_IMAGE=${SEAWEEDFS_IMAGE:-ghcr.io/proctor-dev/proctor-seaweedfs:$IMAGE_TAG}
WEED=${WEED:-$ROOT/bin/weed}
BUSYBOX=${BUSYBOX:-/usr/bin/busybox}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
ARCH=${GOARCH:-$(go env GOARCH)}
SOURCE=https://github.com/proctor-dev/proctor
# The Makefile's build target's flags.
LDFLAGS="-s -w -X github.com/proctor-dev/proctor/internal/version.Version=$VERSION"

# The host packages the images need (the static busybox, CA certificates), unless
# the caller names its own files.
if [[ $BUSYBOX == /usr/bin/busybox && ! -x $BUSYBOX ]] || [[ ! -f $CA_BUNDLE && $CA_BUNDLE == /etc/ssl/certs/ca-certificates.crt ]] ||
  ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
  "$ROOT/hack/install-host-deps.sh" images || die "the host packages the images need could not be installed"
fi
[[ -f $CA_BUNDLE ]] || die "no CA bundle at $CA_BUNDLE: install the Debian package ca-certificates, or set CA_BUNDLE"

echo "build-images: binaries (linux/$ARCH, version $VERSION) into $BUILD"
mkdir -p "$BUILD"
# One go build for the three: they share the package loading. Output names
# come from the packages: proctor, fakellm, pause.
(cd "$ROOT" && GOOS=linux GOARCH="$ARCH" CGO_ENABLED=0 \
  go build -trimpath -ldflags "$LDFLAGS" -o "$BUILD/" . ./test/fakellm/cmd/fakellm ./hack/pause) ||
  die "go build of the binaries failed"
# The image writer runs here, so it is built for this machine, not for $ARCH.
(cd "$ROOT/hack/image" && env -u GOOS -u GOARCH go build -trimpath -o "$BUILD/image" .) ||
  die "go build of hack/image failed"
BUILDER=$BUILD/image

built=() skipped=()

# image NAME INPUT... -- BUILDER-FLAG...
# Writes $OUT/NAME.tar unless the stamp $OUT/.NAME.stamp holds the hash of the
# inputs' contents, the builder and the flags.
image() {
  local name=$1 inputs=()
  shift
  while [[ $1 != -- ]]; do inputs+=("$1"); shift; done
  shift
  local tar=$OUT/$name.tar stamp=$OUT/.$name.stamp sum
  sum=$({
    printf '%s\n' "$@" "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-}"
    sha256sum "$BUILDER" "${inputs[@]}"
  } | sha256sum | cut -d' ' -f1)
  if [[ -f $tar && -f $stamp && $(<"$stamp") == "$sum" ]]; then
    skipped+=("$name")
    echo "build-images: $tar is up to date"
    return
  fi
  rm -f "$stamp"
  "$BUILDER" -o "$tar" -arch "$ARCH" "$@" || die "building $tar failed"
  echo "$sum" >"$stamp"
  built+=("$name")
}

labels() { # labels TITLE: the OCI labels of Proctor's own images
  printf -- '-label\0%s\0' \
    "org.opencontainers.image.title=$1" \
    "org.opencontainers.image.source=$SOURCE" \
    "org.opencontainers.image.version=$VERSION" \
    "org.opencontainers.image.revision=$REVISION" \
    "org.opencontainers.image.licenses=Apache-2.0"
}

# As the Dockerfile's distroless/static:nonroot base: user 65532, its home as
# the working directory (writable, unlike /, for `proctor run`'s results/).
mapfile -d '' proctor_labels < <(labels proctor)
image proctor "$BUILD/proctor" "$CA_BUNDLE" -- \
  -tag "$PROCTOR_IMAGE" -file "/proctor=$BUILD/proctor:0755" -entrypoint /proctor \
  -user 65532:65532 -workdir /home/nonroot -ca-bundle "$CA_BUNDLE" "${proctor_labels[@]}"

mapfile -d '' fakellm_labels < <(labels proctor-fakellm)
image fakellm "$BUILD/fakellm" "$CA_BUNDLE" -- \
  -tag "$FAKELLM_IMAGE" -file "/fakellm=$BUILD/fakellm:0755" -entrypoint /fakellm \
  -user 65532:65532 -workdir /home/nonroot -ca-bundle "$CA_BUNDLE" "${fakellm_labels[@]}"

# The sandbox needs nothing but its binary; 65535 is the real pause's user.
image pause "$BUILD/pause" -- \
  -tag "$PAUSE_IMAGE" -skeleton=false -file "/pause=$BUILD/pause:0755" -entrypoint /pause \
  -user 65535:65535

# busybox stands in for the public image (no registry here), so it must be
# static: the image has no libc.
[[ -x $BUSYBOX ]] ||
  die "no $BUSYBOX: install the Debian package busybox-static (apt-get install busybox-static), or set BUSYBOX"
"$BUILDER" -check-static "$BUSYBOX" -arch "$ARCH" >/dev/null ||
  die "$BUSYBOX is not a static busybox for $ARCH: install the Debian package busybox-static (the package busybox is dynamically linked)"
busybox_version=$("$BUSYBOX" 2>&1 | head -n1 || true)
if [[ $busybox_version != *"v${BUSYBOX_IMAGE##*:} "* ]]; then
  echo "build-images: warning: $BUSYBOX is \"$busybox_version\", yet it is tagged $BUSYBOX_IMAGE" >&2
fi
# Every applet as /bin/NAME -> busybox, as in the public image (which uses hard links).
busybox_links=()
while read -r applet; do
  [[ -n $applet && $applet != busybox ]] && busybox_links+=(-symlink "/bin/$applet=busybox")
done < <("$BUSYBOX" --list)
((${#busybox_links[@]} > 0)) || die "$BUSYBOX --list printed no applets"
image busybox "$BUSYBOX" "$CA_BUNDLE" -- \
  -tag "$BUSYBOX_IMAGE" -file "/bin/busybox=$BUSYBOX:0755" -cmd sh -ca-bundle "$CA_BUNDLE" \
  "${busybox_links[@]}"

# proctor-postgres: the services and hooks of the CRM example (docs/examples/crm)
# in a cluster. Debian's PostgreSQL, newest major version installed, with the
# libraries its programs load (their ldd closure, the loader included), and the
# static busybox for the scripts of services, hooks and agents. Not JIT
# (llvmjit and its bitcode stay out: PostgreSQL runs without them).
pg_bin=$(compgen -G '/usr/lib/postgresql/*/bin' | sort -V | tail -n1)
[[ -x $pg_bin/postgres ]] || die "no PostgreSQL server: apt-get install postgresql (hack/install-host-deps.sh images)"
pg_version=$(basename "$(dirname "$pg_bin")")
stage=$BUILD/postgres-root
rm -rf "$stage"
mkdir -p "$stage/usr/lib/postgresql/$pg_version" "$stage/usr/share/postgresql" "$stage/usr/share/zoneinfo"
cp -a "$pg_bin" "$stage/usr/lib/postgresql/$pg_version/"
cp -a "/usr/lib/postgresql/$pg_version/lib" "$stage/usr/lib/postgresql/$pg_version/"
rm -rf "$stage/usr/lib/postgresql/$pg_version/lib/bitcode" "$stage/usr/lib/postgresql/$pg_version/lib/llvmjit"*
cp -a "/usr/share/postgresql/$pg_version" "$stage/usr/share/postgresql/"
for tz in UTC GMT Etc/UTC; do
  mkdir -p "$stage/usr/share/zoneinfo/$(dirname "$tz")"
  cp -L "/usr/share/zoneinfo/$tz" "$stage/usr/share/zoneinfo/$tz"
done
while read -r lib; do
  mkdir -p "$stage$(dirname "$lib")"
  cp -L "$lib" "$stage$lib"
done < <(find "$stage/usr/lib/postgresql/$pg_version" -type f \( -perm -u+x -o -name '*.so' \) -exec ldd {} \; 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u)
[[ -n $(compgen -G "$stage/lib*/ld-linux*") || -n $(compgen -G "$stage/usr/lib*/ld-linux*") ]] ||
  die "no dynamic loader among PostgreSQL's libraries (ldd printed none)"
(cd "$stage" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$BUILD/postgres-root.sums"
mapfile -d '' postgres_labels < <(labels proctor-postgres)
image postgres "$BUSYBOX" "$CA_BUNDLE" "$BUILD/postgres-root.sums" -- \
  -tag "$POSTGRES_IMAGE" -tree "/=$stage" -file "/bin/busybox=$BUSYBOX:0755" "${busybox_links[@]}" -allow-dynamic \
  -env "PATH=/usr/lib/postgresql/$pg_version/bin:/usr/local/bin:/usr/bin:/bin" -env TZ=UTC -cmd sh \
  -user 65532:65532 -workdir /home/nonroot -ca-bundle "$CA_BUNDLE" "${postgres_labels[@]}"

# SeaweedFS's weed, as make seaweedfs builds it (static: CGO_ENABLED=0); /data
# and /tmp are volumes of the pod (config/seaweedfs).
[[ -x $WEED ]] || die "no $WEED: build it with make seaweedfs, or set WEED"
"$BUILDER" -check-static "$(readlink -f "$WEED")" -arch "$ARCH" >/dev/null || die "$WEED is not a static binary for $ARCH"
mapfile -d '' seaweedfs_labels < <(labels proctor-seaweedfs)
image seaweedfs "$(readlink -f "$WEED")" "$CA_BUNDLE" -- \
  -tag "$SEAWEEDFS_IMAGE" -file "/weed=$(readlink -f "$WEED"):0755" -entrypoint /weed \
  -user 65532:65532 -workdir /data -ca-bundle "$CA_BUNDLE" "${seaweedfs_labels[@]}"

# Kueue's controller as its own Dockerfile lays it out (/manager, user 65532,
# on a distroless static base); its chart runs /manager.
names=(proctor fakellm pause busybox postgres seaweedfs)
if [[ -n ${KUEUE:-} ]]; then
  kueue_bin=$(readlink -f "$KUEUE")
  [[ -x $kueue_bin ]] || die "no $KUEUE: build it with make kueue, or leave KUEUE unset"
  "$BUILDER" -check-static "$kueue_bin" -arch "$ARCH" >/dev/null || die "$KUEUE is not a static binary for $ARCH"
  image kueue "$kueue_bin" "$CA_BUNDLE" -- \
    -tag "registry.k8s.io/kueue/kueue:${KUEUE_VERSION:-v0.17.0}" -file "/manager=$kueue_bin:0755" -entrypoint /manager \
    -user 65532:65532 -workdir / -ca-bundle "$CA_BUNDLE"
  names+=(kueue)
fi

echo "build-images: built: ${built[*]:-nothing}; up to date: ${skipped[*]:-none}"
for name in "${names[@]}"; do
  ls -l "$OUT/$name.tar"
done
