#!/usr/bin/env bash
# check.sh: the chart's checks, which make test-deploy runs. helm lint
# --strict and helm template for the default values and for each values
# file of ci/ (one per setup docs/DEPLOY.md describes); every manifest
# rendered validated against the Kubernetes schemas (kubernetes-validate
# --strict, pinned in requirements.txt) and held to what the chart
# promises (check_manifests.py); values the chart must refuse, refused.
#
# The policy, catalogs and personas the ci/ files put in the chart's
# ConfigMaps are checked by gated itself (policy check, personas lint
# --strict), as serve would load them from the mounts.
#
# HELM is the helm binary (make test-deploy builds it from the Go module
# proxy); PYTHON a python with requirements.txt installed; GATED the
# gated binary; OUT where the rendered manifests go.
set -euo pipefail
cd "$(dirname "$0")"
: "${HELM:?HELM names the helm binary}" "${PYTHON:?PYTHON names a python with requirements.txt}" "${GATED:?GATED names the gated binary}"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
chart=gated
"$HELM" version --short

render() { # render NAME [VALUES]
  local name=$1 values=()
  [ $# -gt 1 ] && values=(-f "$2")
  "$HELM" lint --strict "$chart" "${values[@]}"
  "$HELM" template gated "$chart" --namespace gated "${values[@]}" >"$OUT/$name.yaml"
  echo "rendered $name: $(grep -c '^kind:' "$OUT/$name.yaml") objects"
}

render default
for f in "$chart"/ci/*.yaml; do
  render "$(basename "$f" .yaml)" "$f"
done

# The schemas of the newest Kubernetes the package knows and of the
# oldest the chart supports (Chart.yaml's kubeVersion).
for k in 1.37.0 1.27.0; do
  "$PYTHON" -m kubernetes_validate --strict --quiet -k "$k" "$OUT"/*.yaml
  echo "kubernetes-validate -k $k --strict: $(ls "$OUT"/*.yaml | wc -l) files valid"
done
rm -rf "$OUT/files"
"$PYTHON" check_manifests.py "$OUT" --extract "$OUT/files"
files=$OUT/files/policy-configmaps
"$GATED" policy check "$files/gated-policy" --policy-data "$files/gated-catalogs/sops.yaml"
"$GATED" personas lint --strict "$files/gated-personas"

# Values the chart refuses, each with the reason it gives.
refuse() { # refuse REASON VALUES...
  local reason=$1; shift
  local args=() out
  for v in "$@"; do args+=(--set "$v"); done
  if out=$("$HELM" template gated "$chart" "${args[@]}" 2>&1); then
    echo "helm template $* rendered; it must refuse: $reason" >&2
    exit 1
  fi
  grep -qF "$reason" <<<"$out" || { echo "helm template $*: want \"$reason\", got: $out" >&2; exit 1; }
  echo "refused $*: $reason"
}
refuse "console.enabled needs operators.secretName" console.enabled=true
refuse "at '/nats/auth/type'" nats.auth.type=plain
refuse "additional properties 'replicas' not allowed" replicas=3
refuse "at '/streams/verdictTTL'" streams.verdictTTL=7days
refuse "nats.auth.type creds needs nats.auth.secretName" nats.auth.type=creds
refuse "nats.auth.type password needs nats.auth.user" nats.auth.type=password nats.auth.secretName=s nats.auth.secretKey=k
refuse "catalogs.existingConfigMap needs catalogs.keys" catalogs.existingConfigMap=c
refuse "nats.url" nats.url=
