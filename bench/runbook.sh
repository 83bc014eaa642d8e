#!/usr/bin/env bash
# The careful manual runbook for a mount-option change, as a script: what a cluster's operator
# does without mountwarden, and what bench/rollout.py times mountwarden against.
#
#   bench/runbook.sh NAMESPACE NEW_OPTIONS EXPECTED_JSON PV...
#
# NEW_OPTIONS: the options to set, comma-separated (kubectl patch of each PV's mountOptions).
# EXPECTED_JSON: the options to find in effect, as a JSON list of canonical tokens (a node's report lists
# every option in effect, kernel defaults included).
# Then, one Deployment of NAMESPACE at a time, in name order:
#   kubectl rollout restart; kubectl rollout status; then wait until the NodeMountReport of the
#   node of every replica shows that replica's volume with every option of EXPECTED_JSON in effect (polled every
#   $RUNBOOK_POLL seconds, 0.5 by default). A new replica that started on a node where an old one
#   still held the export shares its superblock and keeps the old options (nfs(5), sharecache):
#   it is deleted so that its replacement mounts afresh, and the wait goes on after rollout status.
# Needs kubectl (on PATH, with KUBECONFIG set) and jq.
set -euo pipefail
namespace=$1 options=$2 expected=$3
shift 3
poll=${RUNBOOK_POLL:-0.5}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

options_json=$(jq -cn --arg o "$options" '$o | split(",")')
for pv in "$@"; do
  kubectl patch pv "$pv" --type merge -p "{\"spec\":{\"mountOptions\":$options_json}}" >/dev/null
done

# Prints "verified", or the replicas whose reported mount kept other options, or nothing (not reported yet).
check() {
  local deployment=$1 spec selector
  spec=$(kubectl get deployment -n "$namespace" "$deployment" -o json)
  selector=$(jq -r '.spec.selector.matchLabels | to_entries | map("\(.key)=\(.value)") | join(",")' <<<"$spec")
  # Files, not arguments: the reports of a cluster outgrow one argument (128 KiB, execve(2): E2BIG).
  kubectl get pods -n "$namespace" -l "$selector" -o json >"$scratch/pods.json"
  kubectl get nodemountreports -o json >"$scratch/reports.json"
  jq -rn --slurpfile pods "$scratch/pods.json" --slurpfile reports "$scratch/reports.json" \
    --argjson expected "$expected" --argjson replicas "$(jq .spec.replicas <<<"$spec")" '
    $pods[0] as $pods | $reports[0] as $reports |
    [$pods.items[] | select(.metadata.deletionTimestamp == null)
     | .metadata.uid as $uid | .spec.nodeName as $node
     | {name: .metadata.name,
        mounts: [$reports.items[] | select(.metadata.name == $node) | .spec.volumes[] | select(.podUid == $uid)
                 | .effectiveOptions]}] as $live
    | def holds: ($expected - .) == [];
      if ($live | length) == $replicas and all($live[]; .mounts | any(holds)) then "verified"
      else $live[] | select((.mounts | length) > 0 and (.mounts | any(holds) | not)) | .name end'
}

for deployment in $(kubectl get deployments -n "$namespace" -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort); do
  kubectl rollout restart -n "$namespace" "deployment/$deployment" >/dev/null
  kubectl rollout status -n "$namespace" "deployment/$deployment" --timeout=600s >/dev/null
  while true; do
    found=$(check "$deployment")
    [ "$found" = verified ] && break
    if [ -n "$found" ]; then  # kept an old superblock: remount
      kubectl delete pod -n "$namespace" --wait=false $found >/dev/null
      kubectl rollout status -n "$namespace" "deployment/$deployment" --timeout=600s >/dev/null
    fi
    sleep "$poll"
  done
  echo "verified deployment/$deployment"
done
