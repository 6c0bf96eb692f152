#!/usr/bin/env bash
# Build the images the dev cluster's node runs, with buildah, from Debian packages and this
# repository only (no image can be pulled here):
#
#   docker.io/library/debian:<DEBIAN>-slim     mmdebstrap's minbase of Debian <DEBIAN>
#   docker.io/library/rust:<RUST>-slim-<DEBIAN>  that, with gcc and this machine's Rust
#                                              toolchain (rustup's, at the Dockerfile's RUST_VERSION)
#                                              (the two base images the Dockerfile names, so
#                                              the Dockerfile is built as it is, unchanged)
#   localhost/kubosh/pause:1                   the Pod sandbox (tools/node/pause.c, static)
#   docker.io/library/kubosh:<appVersion>      the repository's Dockerfile
#   docker.io/library/nats:<NATS_VERSION>      nats-server and nats-server-config-reloader
#                                              (github.com/nats-io/nack), built from the Go
#                                              module proxy, on the Debian base
#   localhost/kubosh/coredns:<version>         the node's cluster DNS: tools/coredns, CoreDNS
#                                              (github.com/coredns/coredns) with the five
#                                              plugins the node's Corefile uses
#
# Each image is written as an OCI archive the node's containerd imports. The kubosh image is
# keyed by a hash of the build context, CoreDNS by its version and source, the others by
# their versions. Archives present are not built again. Progress goes to stderr; the last
# stdout line is the archive directory:
#   KUBOSH_IMAGE_DIR=$(tools/images.sh)
#
# Needs root (buildah, mmdebstrap), and the apt packages buildah, mmdebstrap, gcc, libc6-dev,
# runc (installed when missing); Go for the NATS image (as tools/testbins.sh).
# Overrides: KUBOSH_CACHE, NATS_VERSION, NACK_VERSION, and
# KUBOSH_IMAGE_PROFILE (the Dockerfile's CARGO_PROFILE: release, or dev for the test
# command, which builds in a third of the time).
set -euo pipefail
exec 3>&1 1>&2
cd "$(dirname "$0")/.."

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ $(id -u) == 0 ]] || die "building images needs root (buildah and mmdebstrap run as root here)"

NATS_VERSION=${NATS_VERSION:-2.15.2}
NACK_VERSION=${NACK_VERSION:-0.16.2} # the newest the Go module proxy serves (0.17.x: 403)
arg() { sed -n "s/^ARG $1=\(.*\)$/\1/p" Dockerfile; }
RUST_VERSION=$(arg RUST_VERSION)
DEBIAN=$(arg DEBIAN)
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/kubosh/Chart.yaml)
[[ -n $RUST_VERSION && -n $DEBIAN && -n $APP_VERSION ]] || die "cannot read the Dockerfile's ARGs or the chart's appVersion"

need=()
# buildah runs its RUN steps with an OCI runtime, which Debian only recommends.
for pair in buildah:buildah mmdebstrap:mmdebstrap gcc:gcc runc:runc; do
	command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || need+=(libc6-dev)
if ((${#need[@]})); then
	log "apt-get install ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >&2 ||
		die "apt-get install ${need[*]} failed"
fi

cache="${KUBOSH_CACHE:-$HOME/.cache/kubosh}/images"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

go_env() {
	command -v go >/dev/null || [[ ! -x /usr/local/go/bin/go ]] || export PATH="/usr/local/go/bin:$PATH"
	command -v go >/dev/null || die "Go is needed for the NATS and CoreDNS images (as for tools/testbins.sh)"
	export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-modcacherw -buildvcs=false"
}
# image_of BASE IMAGE ENTRYPOINT FILE...: IMAGE is BASE with the FILEs in ENTRYPOINT's
# directory, running ENTRYPOINT (as IMAGE_USER, when set).
image_of() {
	local base=$1 image=$2 entrypoint=$3 c dest
	shift 3
	dest=$(dirname "$entrypoint")
	[[ $dest == / ]] || dest="$dest/"
	c=$(buildah from --pull=never "$base")
	buildah copy -q "$c" "$@" "$dest" >/dev/null
	buildah config --cmd '' "$c" # the base's (bash) would become the entrypoint's argument
	buildah config --entrypoint "[\"$entrypoint\"]" ${IMAGE_USER:+--user "$IMAGE_USER"} "$c"
	buildah commit -q "$c" "$image" >/dev/null
	buildah rm "$c" >/dev/null
}
has_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }
# archive IMAGE FILE: writes IMAGE as an OCI archive named IMAGE (what containerd imports).
archive() {
	local tmp="$2.tmp"
	rm -f "$tmp"
	buildah push -q "$1" "oci-archive:$tmp:$1" >/dev/null
	mv -f "$tmp" "$2"
}

# --- the Debian base
debian="docker.io/library/debian:${DEBIAN}-slim"
if ! has_image "$debian"; then
	log "building $debian with mmdebstrap ..."
	start=$SECONDS
	tar="$cache/debian-${DEBIAN}.tar"
	mmdebstrap --quiet --variant=minbase --aptopt='APT::Install-Recommends "false"' \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
		"$DEBIAN" "$tar" http://deb.debian.org/debian </dev/null >&2
	c=$(buildah from scratch)
	buildah add -q "$c" "$tar" / >/dev/null
	buildah config --cmd '["bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
	buildah commit -q "$c" "$debian" >/dev/null
	buildah rm "$c" >/dev/null
	rm -f "$tar"
	log "built $debian in $((SECONDS - start))s"
fi

# --- the Rust builder: the Debian base, gcc and this machine's toolchain
rust="docker.io/library/rust:${RUST_VERSION}-slim-${DEBIAN}"
if ! has_image "$rust"; then
	sysroot=$(rustc "+${RUST_VERSION}" --print sysroot 2>/dev/null || rustc --print sysroot)
	have=$("$sysroot/bin/rustc" --version | awk '{ print $2 }')
	[[ $have == "$RUST_VERSION" || $have == "$RUST_VERSION".* ]] ||
		die "the Dockerfile builds with Rust $RUST_VERSION; this machine's rustc is $have (rustup toolchain install $RUST_VERSION)"
	log "building $rust (Rust $have from $sysroot) ..."
	start=$SECONDS
	c=$(buildah from --pull=never "$debian")
	buildah run --network=host --env DEBIAN_FRONTEND=noninteractive "$c" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*' </dev/null >&2
	mnt=$(buildah mount "$c")
	# This machine's own CAs (a TLS-inspecting proxy's, say): cargo reaches crates.io as
	# the host does.
	if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
		cp /usr/local/share/ca-certificates/*.crt "$mnt/usr/local/share/ca-certificates/"
		buildah run "$c" update-ca-certificates </dev/null >/dev/null
	fi
	# The toolchain without its documentation (share/doc is most of its size).
	mkdir -p "$mnt/usr/local/rust" "$mnt/usr/local/cargo/bin"
	tar -C "$sysroot" --exclude=./share/doc -cf - . | tar -C "$mnt/usr/local/rust" -xf -
	buildah umount "$c" >/dev/null
	buildah config --env CARGO_HOME=/usr/local/cargo \
		--env PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
	buildah commit -q "$c" "$rust" >/dev/null
	buildah rm "$c" >/dev/null
	log "built $rust in $((SECONDS - start))s"
fi

# --- the Pod sandbox
pause=localhost/kubosh/pause:1
pause_key=$(sha256sum tools/node/pause.c | cut -c1-16)
out_pause="$cache/pause-${pause_key}.tar"
if [[ ! -s $out_pause ]]; then
	log "building $pause ..."
	work=$(mktemp -d)
	gcc -static -Os -o "$work/pause" tools/node/pause.c
	IMAGE_USER=65535:65535 image_of scratch "$pause" /pause "$work/pause"
	rm -rf "$work"
	archive "$pause" "$out_pause"
fi

# --- kubosh, from the Dockerfile as it is
context_key=$( (git ls-files -co --exclude-standard -z -- . ':!:target' | LC_ALL=C sort -z |
	xargs -0 sha256sum 2>/dev/null) | sha256sum | cut -c1-16)
kubosh="docker.io/library/kubosh:${APP_VERSION}"
profile=${KUBOSH_IMAGE_PROFILE:-release}
out_kubosh="$cache/kubosh-${APP_VERSION}-${profile}-${context_key}.tar"
if [[ ! -s $out_kubosh ]]; then
	log "building $kubosh from the Dockerfile (cargo profile $profile, context $context_key) ..."
	start=$SECONDS
	build_log="$cache/kubosh-build.log"
	buildah bud --quiet --pull=never --network=host --build-arg "CARGO_PROFILE=$profile" \
		-t "$kubosh" . </dev/null >"$build_log" 2>&1 ||
		{ tail -n 60 "$build_log" >&2; die "building $kubosh failed (the whole log: $build_log)"; }
	archive "$kubosh" "$out_kubosh"
	# The image it replaced, and the newest context's archive only: each is hundreds of MB.
	buildah rmi --prune >/dev/null 2>&1 || true
	find "$cache" -maxdepth 1 -name "kubosh-*.tar" ! -name "$(basename "$out_kubosh")" -delete
	log "built $kubosh in $((SECONDS - start))s"
fi

# --- NATS with its config reloader (what the NATS Helm chart runs; see examples/cluster)
nats="docker.io/library/nats:${NATS_VERSION}"
out_nats="$cache/nats-${NATS_VERSION}-nack-${NACK_VERSION}.tar"
if [[ ! -s $out_nats ]]; then
	log "building $nats ..."
	start=$SECONDS
	go_env
	work=$(mktemp -d)
	# tools/testbins.sh's nats-server when it is this version (the test command builds it first).
	if [[ -x ${KUBOSH_BIN_DIR:-}/nats-server && $("$KUBOSH_BIN_DIR/nats-server" --version 2>/dev/null) == "nats-server: v${NATS_VERSION}" ]]; then
		cp "$KUBOSH_BIN_DIR/nats-server" "$work/nats-server"
	else
		(cd "$work" && GOBIN="$work" go install -trimpath -ldflags "-s -w" "github.com/nats-io/nats-server/v2@v${NATS_VERSION}" </dev/null)
	fi
	dir=$(cd "$work" && go mod download -json "github.com/nats-io/nack@v${NACK_VERSION}" </dev/null |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -d $dir ]] || die "cannot download github.com/nats-io/nack v${NACK_VERSION}"
	(cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$work/nats-server-config-reloader" ./cmd/nats-server-config-reloader </dev/null)
	image_of "$debian" "$nats" /usr/local/bin/nats-server "$work/nats-server" "$work/nats-server-config-reloader"
	rm -rf "$work"
	archive "$nats" "$out_nats"
	log "built $nats in $((SECONDS - start))s"
fi

# --- the dev node's cluster DNS: tools/coredns (CoreDNS with the five plugins the node's
# Corefile uses; half the build of all of them), keyed by its version and source
COREDNS_VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" { print substr($3, 2) }' tools/coredns/go.mod)
[[ -n $COREDNS_VERSION ]] || die "cannot read CoreDNS's version from tools/coredns/go.mod"
COREDNS_SOURCE=$(cat tools/coredns/go.mod tools/coredns/go.sum tools/coredns/main.go | sha256sum | cut -c1-12)
coredns="localhost/kubosh/coredns:${COREDNS_VERSION}"
out_coredns="$cache/coredns-${COREDNS_VERSION}-${COREDNS_SOURCE}.tar"
if [[ ! -s $out_coredns ]]; then
	log "building $coredns ..."
	start=$SECONDS
	go_env
	work=$(mktemp -d)
	(cd tools/coredns && nice -n 10 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$work/coredns" . </dev/null)
	image_of scratch "$coredns" /coredns "$work/coredns"
	rm -rf "$work"
	archive "$coredns" "$out_coredns"
	log "built $coredns in $((SECONDS - start))s"
fi

ln -sfn "$(basename "$out_pause")" "$cache/pause.tar"
ln -sfn "$(basename "$out_coredns")" "$cache/coredns.tar"
ln -sfn "$(basename "$out_kubosh")" "$cache/kubosh.tar"
ln -sfn "$(basename "$out_nats")" "$cache/nats.tar"
echo "$cache" >&3
