#!/usr/bin/env bash
# The demo in one command on a fresh Debian machine with Rust (README, "Run it"): installs
# what `kubosh up` needs before anything long is built, then builds and runs it.
#
#   ./tools/up.sh [kubosh up options]
#
# System packages (ruby for the ERB renderer, a C compiler for the example release's
# packages, curl, unzip, CA certificates, python3 with venv for tools/testbins.sh; with
# --in-cluster the node's containerd, runc, CNI plugins, iptables, conntrack) are
# installed with apt when missing, as root, in one quiet step;
# otherwise the exact command is printed and nothing is built. Go (>= 1.26.3, to build the
# control-plane binaries from the Go module proxy) comes from the proxy too when the
# machine has none that new: golang.org/toolchain, unpacked under ~/.cache/kubosh/go.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[up] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

GO_VERSION=${GO_VERSION:-1.26.8}
GO_MIN=1.26.3

need=()
for pair in ruby:ruby cc:build-essential curl:curl unzip:unzip python3:python3; do
	command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
# python3 -m venv: tools/testbins.sh puts moto (an S3-compatible server) in a venv.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# --in-cluster: the dev cluster's node (containerd, runc, the CNI plugins, iptables,
# conntrack, nsenter, ip); tools/images.sh installs buildah and mmdebstrap itself.
for arg in "$@"; do
	[[ $arg == --in-cluster ]] || continue
	for pair in containerd:containerd runc:runc iptables:iptables conntrack:conntrack nsenter:util-linux ip:iproute2; do
		command -v "${pair%%:*}" >/dev/null || PATH="$PATH:/usr/sbin:/sbin" command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
	done
	[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
done
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)
if ((${#need[@]})); then
	command -v apt-get >/dev/null || die "install ${need[*]} (no apt-get here), then run this again"
	if [[ $(id -u) != 0 ]]; then
		if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
			as_root=(sudo -n)
		else
			die "run as root, or first: sudo apt-get install -y ${need[*]}"
		fi
	else
		as_root=()
	fi
	log "apt-get install ${need[*]}"
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null
fi

go_ok() {
	local v
	v=$("$1" env GOVERSION 2>/dev/null) || return 1
	v=${v#go}
	[[ $(printf '%s\n%s\n' "$GO_MIN" "${v%%[-+ ]*}" | sort -V | head -n1) == "$GO_MIN" ]]
}
go_bin=$(command -v go || true)
[[ -n $go_bin ]] || { [[ -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go; }
if [[ -n $go_bin ]] && go_ok "$go_bin"; then
	export PATH="$(dirname "$go_bin"):$PATH"
else
	cache="${KUBOSH_CACHE:-$HOME/.cache/kubosh}/go/go${GO_VERSION}"
	if ! go_ok "$cache/bin/go"; then
		log "Go ${GO_VERSION} from the Go module proxy (golang.org/toolchain) into $cache ..."
		proxy=${GOPROXY:-https://proxy.golang.org}
		proxy=${proxy%%,*}
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip" ||
			die "cannot download Go ${GO_VERSION} from $proxy; install Go >= $GO_MIN to /usr/local/go"
		unzip -q "$tmp/go.zip" -d "$tmp/unpacked"
		rm -rf "$cache"
		mkdir -p "$(dirname "$cache")"
		mv "$tmp/unpacked/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" "$cache"
		chmod +x "$cache/bin/"* "$cache/pkg/tool/"*/* 2>/dev/null || true
		go_ok "$cache/bin/go" || die "the Go ${GO_VERSION} just unpacked does not run"
	fi
	export PATH="$cache/bin:$PATH"
fi
export GOTOOLCHAIN=local

# The control-plane binaries first (minutes, once), then kubosh itself.
KUBOSH_BIN_DIR=$(tools/testbins.sh | tail -n 1)
export KUBOSH_BIN_DIR
exec cargo run --release -- up "$@"
