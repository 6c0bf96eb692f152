#!/usr/bin/env bash
# Build kube-apiserver and kubectl from the Go module proxy (no release downloads).
#
#   build.sh DEST_DIR [kube-apiserver] [kubectl]   build into DEST_DIR (default: both)
#   build.sh --update                              rewrite go.mod/go.sum for $K8S_VERSION
#
# K8S_VERSION (x.y.z) defaults to the k8s.io/kubernetes version required by go.mod.
#
# Why the replace block: k8s.io/kubernetes requires its "staging" modules
# (k8s.io/api, k8s.io/apiserver, ...) at the placeholder v0.0.0 and points them at
# ./staging/... in its own repo. Replaces in a dependency's go.mod are ignored and
# the staging dirs are not in the module zip, so the main module (this one) must
# map each of them to the published copy v0.<minor>.<patch>. The list is derived
# here from the downloaded upstream go.mod on every run, never maintained by hand;
# the committed go.mod is checked against it.
#
# Progress goes to stderr. Needs: go (>= the go line of upstream's go.mod), awk.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[k8s-testbins] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

update=0
if [[ ${1:-} == --update ]]; then update=1; shift; fi
if [[ $update == 0 ]]; then
	[[ $# -ge 1 ]] || die "usage: $0 DEST_DIR [kube-apiserver] [kubectl] | $0 --update"
	dest=$1; shift
	bins=("$@"); [[ ${#bins[@]} -gt 0 ]] || bins=(kube-apiserver kubectl)
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GO111MODULE=on
export GOFLAGS="-modcacherw -buildvcs=false"

k8s_from_gomod() {
	awk '{ sub(/^require[ \t]+/, "") } $1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print substr($2, 2); exit }' "$1"
}
K8S_VERSION=${K8S_VERSION:-$(k8s_from_gomod "$here/go.mod")}
[[ $K8S_VERSION =~ ^1\.([0-9]+)\.([0-9]+)$ ]] ||
	die "K8S_VERSION must be 1.y.z (got '${K8S_VERSION}'); set it or run --update with it set"
minor=${BASH_REMATCH[1]}
staging_v="v0.${minor}.${BASH_REMATCH[2]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/k8s-testbins.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. The upstream go.mod of the exact release (fetched outside any module, so
#    our go.mod cannot get in the way; this also downloads the module zip).
mkdir "$work/empty"
dl=$(cd "$work/empty" && go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" </dev/null) ||
	die "cannot download k8s.io/kubernetes@v${K8S_VERSION}: $(printf '%s' "$dl" | grep '"Error"' || true)"
json_field() { printf '%s\n' "$dl" | sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -n1; }
up_gomod=$(json_field GoMod)
up_time=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(json_field Info)")
[[ -f $up_gomod ]] || die "no go.mod for k8s.io/kubernetes@v${K8S_VERSION}"

# 2. Derive: modules required at exactly v0.0.0 (the staging modules), and check
#    that upstream replaces each with ./staging/... and replaces nothing else.
awk '
	/^require[ \t]*\(/ { inreq = 1; next }
	inreq && /^\)/     { inreq = 0; next }
	/^require[ \t]/    { sub(/^require[ \t]+/, ""); if ($2 == "v0.0.0") print $1; next }
	inreq && $2 == "v0.0.0" { print $1 }
' "$up_gomod" | sort -u >"$work/staging.txt"
awk '
	/^replace[ \t]*\(/ { inrep = 1; next }
	inrep && /^\)/     { inrep = 0; next }
	/^replace[ \t]/    { sub(/^replace[ \t]+/, ""); if ($0 ~ /=>/) print; next }
	inrep && /=>/      { print }
' "$up_gomod" >"$work/up-replaces.txt"
[[ -s $work/staging.txt ]] || die "found no v0.0.0 requires in $up_gomod (format changed?)"
if awk '$2 == "=>" && $3 ~ /^\.\/staging\// { next } { found = 1; print } END { exit !found }' \
	"$work/up-replaces.txt" >&2; then
	die "upstream go.mod has replace directives other than ./staging (above): review and copy them"
fi
while read -r m; do
	grep -Eq "^[[:space:]]*${m//./\\.}[[:space:]]+=>[[:space:]]+\./staging/" "$work/up-replaces.txt" ||
		die "$m is required at v0.0.0 but upstream does not replace it with ./staging"
done <"$work/staging.txt"
up_go=$(awk '$1 == "go" { print $2; exit }' "$up_gomod")
up_godebug=$(awk '$1 == "godebug" && $2 ~ /^default=/ { print $2; exit }' "$up_gomod")
log "k8s.io/kubernetes v${K8S_VERSION}: $(wc -l <"$work/staging.txt") staging modules -> ${staging_v}; go ${up_go}${up_godebug:+, godebug $up_godebug}"

# 3. Apply to a copy of our module: minimal edits, so a go.mod that is already
#    right stays byte-identical and the committed go.sum is used as is.
cp -R "$here/go.mod" "$here/cmd" "$work/"
[[ -f $here/go.sum ]] && cp "$here/go.sum" "$work/"
cd "$work"
edits=("-go=${up_go}" "-require=k8s.io/kubernetes@v${K8S_VERSION}"
	"-require=k8s.io/kubectl@${staging_v}" "-require=k8s.io/component-base@${staging_v}")
[[ -n $up_godebug ]] && edits+=("-godebug=${up_godebug}")
# current k8s.io replaces in our go.mod, as "old new version"
awk '
	/^replace[ \t]*\(/ { inrep = 1; next }
	inrep && /^\)/     { inrep = 0; next }
	/^replace[ \t]/    { sub(/^replace[ \t]+/, ""); if ($2 == "=>") print $1, $3, $4; next }
	inrep && $2 == "=>" { print $1, $3, $4 }
' go.mod | awk '$1 ~ /^k8s\.io\//' | sort >cur-replaces.txt
awk -v v="$staging_v" '{ print $1, $1, v }' staging.txt | sort >want-replaces.txt
while read -r old _; do edits+=("-dropreplace=$old"); done < <(comm -23 cur-replaces.txt want-replaces.txt)
while read -r old new ver; do edits+=("-replace=$old=$new@$ver"); done < <(comm -13 cur-replaces.txt want-replaces.txt)
go mod edit "${edits[@]}"

if [[ $update == 1 ]] || ! cmp -s go.mod "$here/go.mod" || [[ ! -f $here/go.sum ]]; then
	[[ $update == 1 ]] || log "NOTE: committed go.mod is not the one derived for v${K8S_VERSION}; tidying a temporary copy (run '$0 --update' to refresh the committed files)"
	log "go mod tidy ..."
	go mod tidy </dev/null
	if [[ $update == 1 ]]; then
		cp go.mod go.sum "$here/"
		log "updated $here/go.mod and go.sum for k8s.io/kubernetes v${K8S_VERSION}"
		exit 0
	fi
fi

# 4. Build, with the same tags, flags and version stamps as upstream release builds.
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=v${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${minor}"
	ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=${up_time}"
done
mkdir -p "$dest"
tmpout=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$work" "$tmpout"' EXIT
for b in "${bins[@]}"; do
	[[ -d cmd/$b ]] || die "unknown binary $b"
	log "building $b v${K8S_VERSION} ..."
	start=$(date +%s)
	nice -n 10 go build -mod=readonly -trimpath -tags selinux,notest,grpcnotrace \
		-ldflags "$ldflags" -o "$tmpout/$b" "./cmd/$b" </dev/null
	mv -f "$tmpout/$b" "$dest/$b" # same filesystem: atomic rename
	log "built $b in $(($(date +%s) - start))s -> $dest/$b"
done
