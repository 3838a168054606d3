#!/usr/bin/env bash
# Gate a pipeline on an EvaluationRun: wait until it is Complete, then fail unless it
# Succeeded with a pass rate of at least MIN_PASS_RATE (0-1; cells the agent errored count as
# not passed, other errored cells are excluded from the pass rate, so a run whose every cell
# errored for the infrastructure has none and fails the gate).
#
#   run=$(kubectl create -f examples/gitops/ci/pr-run.yaml -o name)
#   NAMESPACE=evals examples/gitops/ci/gate.sh "$run" 0.8 30m
#
# NAMESPACE (optional) is the run's namespace (`kubectl create -o name` leaves it out);
# KUBECTL (optional) is the kubectl to call.
#
# Why `--for=condition=Complete` and not `--for=jsonpath='{.status.phase}'=Succeeded`: the
# Complete condition turns True for Succeeded *and* Failed, so a failed run ends the wait at
# once instead of holding the pipeline until the timeout.
set -euo pipefail

run="${1:?usage: gate.sh evaluationrun/NAME MIN_PASS_RATE [TIMEOUT]}"
min="${2:?usage: gate.sh evaluationrun/NAME MIN_PASS_RATE [TIMEOUT]}"
timeout="${3:-30m}"
kubectl=("${KUBECTL:-kubectl}")
if [[ -n "${NAMESPACE:-}" ]]; then
    kubectl+=(--namespace "$NAMESPACE")
fi

"${kubectl[@]}" wait --for=condition=Complete --timeout="$timeout" "$run" >/dev/null
phase="$("${kubectl[@]}" get "$run" -o jsonpath='{.status.phase}')"
rate="$("${kubectl[@]}" get "$run" -o jsonpath='{.status.passRate}')"
"${kubectl[@]}" get "$run" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'

if [[ "$phase" != "Succeeded" ]]; then
    echo "::error::$run ended in phase ${phase:-unknown}"
    exit 1
fi
if [[ -z "$rate" ]]; then
    echo "::error::$run has no pass rate (no cell passed or failed; see its TestsPassed condition)"
    exit 1
fi
if ! awk -v rate="$rate" -v min="$min" 'BEGIN { exit !(rate + 0 >= min + 0) }'; then
    echo "::error::$run pass rate $rate is below the gate $min"
    exit 1
fi
echo "$run passed the gate: pass rate $rate >= $min"
