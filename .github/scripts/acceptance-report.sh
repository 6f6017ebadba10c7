#!/usr/bin/env bash
# CI, after `pulumi up` (also a failed one): the acceptance report of STACK as Markdown, in the run's
# summary and in acceptance-STACK.md (uploaded by the workflow). The admin kubeconfig comes from the
# stack output into a 0600 file under RUNNER_TEMP, is used by kubectl for the checks' logs, and removed.
# Exit status: the report's (1 when a check that is not advisory failed, naming it and its node).
# Environment: STACK, RUNNER_TEMP, GITHUB_STEP_SUMMARY; KUBECONFIG_STACK, the stack that exports the admin kubeconfig
# when it is another (layout: layered: <env>-cluster, while the checks' results are <env>-platform's). Needs kubectl.
set -euo pipefail
: "${STACK:?}" "${RUNNER_TEMP:?}" "${GITHUB_STEP_SUMMARY:?}"
command -v kubectl >/dev/null || { echo "error: kubectl is not installed on this runner" >&2; exit 1; }

umask 077
KUBECONFIG=$(mktemp "$RUNNER_TEMP/kubeconfig.XXXXXX")
export KUBECONFIG
trap 'rm -f "$KUBECONFIG"' EXIT
pulumi stack output kubeconfig --show-secrets --stack "${KUBECONFIG_STACK:-$STACK}" >"$KUBECONFIG"

status=0
venv/bin/python -m stacks.acceptance_report "$STACK" --out "acceptance-$STACK.md" || status=$?
cat "acceptance-$STACK.md" >>"$GITHUB_STEP_SUMMARY"
exit "$status"
