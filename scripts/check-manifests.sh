#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/kubernetes/, offline but for one PyPI install:
# - every resource validated strictly (unknown fields are errors) against the Kubernetes JSON
#   schemas kubernetes-validate bundles, for every Kubernetes version it knows (1.25 to 1.37);
# - the ServiceMonitor is a CRD, which kubernetes-validate cannot validate (it skips unknown kinds
#   with a warning and passes): it is validated against a small JSON schema of the fields we use,
#   in scripts/check_manifests.py, written after the Prometheus operator's CRD;
# - kustomization.yaml lists every file; the manifests agree with each other and with the
#   ConfigMap's redlock-proxy.toml, which `redlock-proxy --check-config` must accept.
# Exits non-zero on any problem. kubernetes-validate goes into a venv of its own, target/k8s-venv
# (reinstalled when the pin changes). kubectl is not used: Debian does not package it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/k8s-venv
pin="kubernetes-validate==1.37.0"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$pin" ]; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || {
    echo "check-manifests: python3 with venv needed (scripts/deps.sh test installs python3-venv)" >&2
    exit 1
  }
  echo "check-manifests: installing $pin into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pin"
  echo "$pin" > "$venv/.installed"
fi
toml="$venv/redlock-proxy.toml"
rm -f "$toml"
"$venv/bin/python" scripts/check_manifests.py deploy/kubernetes "$toml"
# The proxy itself reads the ConfigMap's file: unknown keys, bad addresses and values fail here.
# REDLOCK_PROXY names a built binary (scripts/test.sh passes the one `cargo test` just built, which
# `cargo build` would build again with other features); unset, cargo builds one.
bin="${REDLOCK_PROXY:-}"
if [ -z "$bin" ]; then
  cargo build -q --bin redlock-proxy
  bin="${CARGO_TARGET_DIR:-target}/debug/redlock-proxy"
fi
"$bin" --check-config "$toml" >/dev/null || {
  echo "check-manifests: redlock-proxy --check-config refused the ConfigMap's redlock-proxy.toml" >&2
  exit 1
}
echo "check-manifests: the ConfigMap's redlock-proxy.toml passes redlock-proxy --check-config"
