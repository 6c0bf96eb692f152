#!/usr/bin/env bash
# The kubosh test command (README "Test"): installs what the tests need on a fresh machine,
# then runs formatting, lints and every test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
started=$SECONDS

# System packages the tests use (Debian). Only installs what is missing.
need_pkgs=()
# The dev cluster's node (tests/cluster): containerd, runc, CNI plugins, iptables, conntrack,
# nsenter and ip; its images are built with buildah from mmdebstrap's Debian (tools/images.sh).
for pair in "openssl:openssl" "ssh-keygen:openssh-client" "curl:curl" "git:git" "cc:build-essential" "ruby:ruby" \
  "containerd:containerd" "runc:runc" "iptables:iptables" "conntrack:conntrack" "nsenter:util-linux" "ip:iproute2" \
  "buildah:buildah" "mmdebstrap:mmdebstrap"; do
  cmd=${pair%%:*} pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
[[ -x /usr/lib/cni/bridge ]] || need_pkgs+=(containernetworking-plugins)
# python3 -m venv, for the S3-compatible test server (moto, installed by tools/testbins.sh).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
if ((${#need_pkgs[@]})); then
  step "apt-get install ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# Rust components for the checks below.
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

# Real control-plane binaries (kube-apiserver, kubectl, helm, nats-server), built once from
# the Go module proxy, and moto (an S3-compatible server) from PyPI, cached under
# ~/.cache/kubosh, keyed by version.
if [[ -x tools/testbins.sh ]]; then
  step "control-plane binaries"
  KUBOSH_BIN_DIR=$(tools/testbins.sh | tail -n 1)
  export KUBOSH_BIN_DIR
  step "binaries in $KUBOSH_BIN_DIR"
fi

# A clean clone builds everything once: incremental caches would only double the disk used
# (the workspace links about 17 test binaries).
if [[ "${CI:-}" == "true" ]]; then
  export CARGO_INCREMENTAL=0
fi
step "disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free"

# The images the dev cluster's node runs: the repository's Dockerfile built with buildah,
# NATS, CoreDNS and the Pod sandbox, as OCI archives under ~/.cache/kubosh/images. Only the
# `cluster` tests need them, so they are built in the background at the lowest priority,
# while the checks and the other tests run: those leave a core idle much of the time (links,
# tests waiting on agents), and the image build takes minutes of CPU.
# The image's kubosh is a dev build here (the Dockerfile's CARGO_PROFILE): a release build
# would take ten of the budget's minutes.
images_log=$(mktemp "${TMPDIR:-/tmp}/kubosh-images.XXXXXX")
step "images (tools/images.sh), in the background: $images_log"
KUBOSH_IMAGE_PROFILE=dev setsid nice -n 19 tools/images.sh >"$images_log.dir" 2>"$images_log" &
images_pid=$!
# A check failing before the images are waited for stops their build too (its own session).
trap 'kill -- -"$images_pid" 2>/dev/null || true' EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "functions over 100 lines without a reason (tools/long-fns.py)"
python3 tools/long-fns.py

step "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings

# 8 tests at a time per binary on 2 cores: the e2e binary's tests mostly wait (agents, watch
# times, timeouts, killed processes coming back) and take 6 minutes so instead of 19 at the
# same CPU; the other binaries are done within a minute either way. The same cargo arguments
# each time, so every crate is built once with the workspace's features. First every test
# but the node's (tests/cluster's `on_the_node`), then, with the images built, those.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-8}
step "cargo test (all but the node's tests)"
tests_failed=0
cargo test --locked --workspace --no-fail-fast -- --skip on_the_node:: || tests_failed=1

step "waiting for the images ($((SECONDS - started)) s so far)"
if ! wait "$images_pid"; then
  cat "$images_log" >&2
  echo "tools/images.sh failed" >&2
  exit 1
fi
trap - EXIT
KUBOSH_IMAGE_DIR=$(tail -n 1 "$images_log.dir")
export KUBOSH_IMAGE_DIR
grep -v '^$' "$images_log" >&2 || true
rm -f "$images_log" "$images_log.dir"
step "images in $KUBOSH_IMAGE_DIR ($((SECONDS - started)) s so far)"

step "cargo test --test cluster (the node's tests)"
cargo test --locked --workspace --no-fail-fast --test cluster || tests_failed=1
((tests_failed == 0)) || { echo "tests failed" >&2; exit 1; }

step "done in $((SECONDS - started)) s"
