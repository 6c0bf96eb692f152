#!/usr/bin/env bash
# Build (once per version) the binaries the integration tests need, from package
# registries only (Go module proxy; no GitHub/GCS release downloads):
#   kube-apiserver, kubectl  - tools/k8s-testbins (k8s.io/kubernetes module)
#   kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#                            - the same, for the dev cluster's node
#   helm                     - go install helm.sh/helm/v4/cmd/helm
#   nats-server              - go install github.com/nats-io/nats-server/v2
#   bosh                     - go install github.com/cloudfoundry/bosh-cli/v7 (the real
#                              bosh-cli, for release tarball cross-checks)
#   bosh-agent               - github.com/cloudfoundry/bosh-agent/v2 (the real agent, run
#                              with its dummy platform as local-cloud VMs)
#   gitops-health            - tools/gitops-health: Argo CD's Lua health evaluation
#                              (github.com/argoproj/argo-cd/v3) and kstatus
#                              (github.com/fluxcd/cli-utils), keyed by a hash of its
#                              go.mod, go.sum and *.go
#   moto_server              - moto[server] from PyPI in a Python venv (a real S3-compatible
#                              server for the blobstore tests), in
#                              ${KUBOSH_CACHE:-$HOME/.cache/kubosh}/venv-moto-<MOTO_VERSION>/,
#                              linked into the bin directory
# (etcd comes from the crates.io crate etcd-bin-vendored-linux-amd64.)
#
# Output: ${KUBOSH_CACHE:-$HOME/.cache/kubosh}/bin/k8s-v<K8S_VERSION>/
# Binaries already present at the wanted version are skipped. Progress goes to
# stderr; the last (only) stdout line is the bin directory:
#   KUBOSH_BIN_DIR=$(tools/testbins.sh)
#
# Overrides: K8S_VERSION (default: tools/k8s-testbins/go.mod), HELM_VERSION,
# NATS_VERSION, BOSH_CLI_VERSION, BOSH_AGENT_VERSION, MOTO_VERSION, KUBOSH_CACHE, and the usual Go variables (GOPROXY, GOMODCACHE, GOCACHE).
set -euo pipefail
exec 3>&1 1>&2 # everything but the final path goes to stderr

HELM_VERSION=${HELM_VERSION:-4.3.1}
NATS_VERSION=${NATS_VERSION:-2.15.2}
BOSH_CLI_VERSION=${BOSH_CLI_VERSION:-7.9.12} # v7.10.x: the proxy serves .info but refuses the .zip (403)
# The newest bosh-agent the proxy serves (its version list is refused; v2.760.0 and later
# answer 403), and the one bosh-cli 7.9.12's go.mod requires.
BOSH_AGENT_VERSION=${BOSH_AGENT_VERSION:-2.759.0}
MOTO_VERSION=${MOTO_VERSION:-5.2.1}
GO_MIN=1.26.3 # go line of argo-cd v3.5 (gitops-health); k8s.io/kubernetes 1.36, helm 4.3 and nats-server 2.15 need 1.26.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[testbins] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Our own tool is keyed by its source: any change to it builds it again.
GITOPS_HEALTH_SOURCE=$(cd "$here/gitops-health" && cat go.mod go.sum $(LC_ALL=C ls *.go) | sha256sum | cut -c1-16)

K8S_VERSION=${K8S_VERSION:-$(awk '{ sub(/^require[ \t]+/, "") }
	$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print substr($2, 2); exit }' "$here/k8s-testbins/go.mod")}
[[ $K8S_VERSION =~ ^1\.[0-9]+\.[0-9]+$ ]] || die "bad K8S_VERSION '$K8S_VERSION'"
export K8S_VERSION

cache="${KUBOSH_CACHE:-$HOME/.cache/kubosh}"
out="$cache/bin/k8s-v${K8S_VERSION}"
mkdir -p "$out"

as_root() { if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi; }
apt_install() {
	command -v apt-get >/dev/null || die "need $*, and apt-get is not available"
	log "apt-get install $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >&2 &&
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null >&2 ||
		die "apt-get install $* failed"
}

# --- moto (S3-compatible server) in its own venv, from PyPI; no Go needed
venv="$cache/venv-moto-${MOTO_VERSION}"
has_moto() { [[ -x $venv/bin/moto_server ]] && [[ $("$venv/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null) == "$MOTO_VERSION" ]]; }
if ! has_moto; then
	exec 8>"$cache/.venv-moto.lock"
	command -v flock >/dev/null && flock 8
	if ! has_moto; then
		command -v python3 >/dev/null || apt_install python3
		python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
		log "installing moto[server]==${MOTO_VERSION} into $venv ..."
		# Built in place (a venv is not relocatable), then marked complete by moto_server's link.
		rm -rf "$venv"
		python3 -m venv "$venv" >&2
		"$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==${MOTO_VERSION}" </dev/null >&2 ||
			{ rm -rf "$venv"; die "pip install moto[server]==${MOTO_VERSION} failed"; }
		has_moto || { rm -rf "$venv"; die "moto ${MOTO_VERSION} not usable after installing"; }
	fi
	exec 8>&-
fi
ln -sfn "$venv/bin/moto_server" "$out/moto_server"

# --- is each binary already there, at the wanted version? (cheap: runs --version)
has() { # has NAME: 0 if $out/NAME exists and reports the wanted version
	local f="$out/$1" v
	[[ -x $f ]] || return 1
	case $1 in
	kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
		v=$("$f" --version 2>/dev/null) && [[ $v == "Kubernetes v${K8S_VERSION}" ]] ;;
	kubectl) v=$("$f" version --client 2>/dev/null) && [[ $v == *"Client Version: v${K8S_VERSION}"* ]] ;;
	helm) v=$("$f" version --template '{{.Version}}' 2>/dev/null) && [[ $v == "v${HELM_VERSION}" ]] ;;
	nats-server) v=$("$f" --version 2>/dev/null) && [[ $v == "nats-server: v${NATS_VERSION}" ]] ;;
	bosh) v=$("$f" --version 2>/dev/null) && [[ $v == "version ${BOSH_CLI_VERSION}"* ]] ;;
	bosh-agent) v=$("$f" -v 2>/dev/null) && [[ $v == *"${BOSH_AGENT_VERSION}"* ]] ;;
	gitops-health) v=$("$f" version 2>/dev/null) && [[ $v == "gitops-health ${GITOPS_HEALTH_SOURCE} "* ]] ;;
	*) return 1 ;;
	esac
}
all=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy helm nats-server bosh bosh-agent gitops-health)
missing() { local b; for b in "${all[@]}"; do has "$b" || echo "$b"; done; }

todo=$(missing)
if [[ -z $todo ]]; then
	log "all present in $out (k8s v${K8S_VERSION}, helm v${HELM_VERSION}, nats-server v${NATS_VERSION}, bosh v${BOSH_CLI_VERSION}, bosh-agent v${BOSH_AGENT_VERSION}, gitops-health ${GITOPS_HEALTH_SOURCE}, moto ${MOTO_VERSION})"
	echo "$out" >&3
	exit 0
fi

# --- one builder at a time per output dir (parallel CI jobs / test runs)
if command -v flock >/dev/null; then
	exec 9>"$out/.lock"
	flock 9
	todo=$(missing) # someone else may have just built them
fi

# --- prerequisites
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null ||
	die "Go >= $GO_MIN is required (Debian's golang-go is too old); install it to /usr/local/go or put it on PATH"
gov=$(go env GOVERSION) # go1.26.8
gov=${gov#go}
[[ $(printf '%s\n%s\n' "$GO_MIN" "${gov%%[-+ ]*}" | sort -V | head -n1) == "$GO_MIN" ]] ||
	die "Go $gov is too old; need >= $GO_MIN (GOTOOLCHAIN=local: no automatic toolchain download)"
# The Go proxy is HTTPS; a minimal Debian may lack the CA bundle.
[[ -s /etc/ssl/certs/ca-certificates.crt || -n ${SSL_CERT_FILE:-} ]] || apt_install ca-certificates
for t in awk sed sort comm cmp diff mktemp sha256sum; do command -v "$t" >/dev/null || die "missing tool: $t"; done

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GO111MODULE=on
export GOFLAGS="-modcacherw -buildvcs=false"
log "go $gov; GOPROXY=$(go env GOPROXY); GOMODCACHE=$(go env GOMODCACHE); GOCACHE=$(go env GOCACHE)"
log "output: $out"
log "to build: $(echo $todo)"

tmp=$(mktemp -d "$out/.tmp.XXXXXX") # same filesystem as $out: mv is an atomic rename
trap 'rm -rf "$tmp"' EXIT
total_start=$(date +%s)

k8s=()
for b in $todo; do [[ $b == kube* ]] && k8s+=("$b"); done
if [[ ${#k8s[@]} -gt 0 ]]; then
	"$here/k8s-testbins/build.sh" "$out" "${k8s[@]}"
fi

goinstall() { # goinstall NAME MODULE_PATH@VERSION [go flags...]
	local name=$1 pkg=$2 start
	shift 2
	log "building $name (${pkg}) ..."
	start=$(date +%s)
	(cd "$tmp" && GOBIN="$tmp" nice -n 10 go install -trimpath "$@" "$pkg" </dev/null)
	mv -f "$tmp/$name" "$out/$name"
	log "built $name in $(($(date +%s) - start))s -> $out/$name"
}
for b in $todo; do
	case $b in
	helm)
		goinstall helm "helm.sh/helm/v4/cmd/helm@v${HELM_VERSION}" -ldflags "-s -w \
			-X helm.sh/helm/v4/internal/version.version=v${HELM_VERSION} \
			-X helm.sh/helm/v4/internal/version.gitTreeState=clean" ;;
	nats-server)
		goinstall nats-server "github.com/nats-io/nats-server/v2@v${NATS_VERSION}" -ldflags "-s -w" ;;
	bosh) # `go install M@V` looks up M's deprecation in the @v/list the proxy refuses for
		# bosh-cli, so: download the module, build it in place with its own go.mod/go.sum
		# (-mod=mod: the module zip keeps vendor/modules.txt but not the vendored code).
		log "building bosh (github.com/cloudfoundry/bosh-cli/v7@v${BOSH_CLI_VERSION}) ..."
		start=$(date +%s)
		dir=$(cd "$tmp" && go mod download -json "github.com/cloudfoundry/bosh-cli/v7@v${BOSH_CLI_VERSION}" </dev/null |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[[ -n $dir && -d $dir ]] || die "cannot download bosh-cli v${BOSH_CLI_VERSION}"
		(cd "$dir" && nice -n 10 go build -mod=mod -trimpath -o "$tmp/bosh" -ldflags "-s -w \
			-X github.com/cloudfoundry/bosh-cli/v7/cmd.VersionLabel=${BOSH_CLI_VERSION}" . </dev/null)
		mv -f "$tmp/bosh" "$out/bosh"
		log "built bosh in $(($(date +%s) - start))s -> $out/bosh" ;;
	bosh-agent) # Downloaded and built from a copy: its Windows-only dependency inet.af/wf is
		# refused by the proxy (.mod 403) but never compiled on Linux, so an empty local module
		# stands in for it (a replace in the copy's go.mod); CGO off gives a static binary.
		log "building bosh-agent (github.com/cloudfoundry/bosh-agent/v2@v${BOSH_AGENT_VERSION}) ..."
		start=$(date +%s)
		dir=$(cd "$tmp" && go mod download -json "github.com/cloudfoundry/bosh-agent/v2@v${BOSH_AGENT_VERSION}" </dev/null |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[[ -n $dir && -d $dir ]] || die "cannot download bosh-agent v${BOSH_AGENT_VERSION}"
		src="$tmp/bosh-agent-src"
		cp -R "$dir" "$src"
		chmod -R u+w "$src"
		mkdir -p "$src/_stub/wf"
		printf 'module inet.af/wf\n\ngo 1.21\n' >"$src/_stub/wf/go.mod"
		(cd "$src" && go mod edit -replace inet.af/wf=./_stub/wf &&
			nice -n 10 go build -mod=mod -trimpath -o "$tmp/bosh-agent" -ldflags "-s -w \
			-X main.VersionLabel=${BOSH_AGENT_VERSION}" ./main </dev/null)
		mv -f "$tmp/bosh-agent" "$out/bosh-agent"
		log "built bosh-agent in $(($(date +%s) - start))s -> $out/bosh-agent" ;;
	gitops-health) # Our module (argo-cd v3 + kstatus, pinned with its go.sum); built from the
		# repository's source, read-only (-mod=readonly: a go.sum that does not match fails).
		log "building gitops-health (tools/gitops-health, source ${GITOPS_HEALTH_SOURCE}) ..."
		start=$(date +%s)
		(cd "$here/gitops-health" && nice -n 10 go build -mod=readonly -trimpath -o "$tmp/gitops-health" \
			-ldflags "-s -w -X main.source=${GITOPS_HEALTH_SOURCE}" . </dev/null)
		mv -f "$tmp/gitops-health" "$out/gitops-health"
		log "built gitops-health in $(($(date +%s) - start))s -> $out/gitops-health" ;;
	esac
done

still=$(missing)
[[ -z $still ]] || die "not at the wanted version after building: $(echo $still)"
log "done in $(($(date +%s) - total_start))s: $out"
echo "$out" >&3
