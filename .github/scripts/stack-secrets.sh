#!/usr/bin/env bash
# CI: put a stack's secrets from the job's environment into its config, encrypted by the stack's
# secrets provider (PULUMI_CONFIG_PASSPHRASE). Values reach `pulumi config set` on standard input:
# never on a command line (visible in `ps` to every process on a shared self-hosted runner, which is
# why pulumi/actions' `config-map` input is not used: its Automation API passes values as arguments)
# and never printed. Trailing newlines are dropped, so the value is byte for byte what
# `pulumi config set --secret KEY < file` stores: a key that differs only by a newline would change
# every host step's connection and re-run it.
# Environment: STACK; SSH_PRIVATE_KEY (required); RKE2_TOKEN (only for a stack that brings its own
# join token: without it, the token generated on first bring-up and kept in the state is used).
set -euo pipefail
: "${STACK:?}"

trim() {
  local value=$1
  while [[ $value == *$'\n' || $value == *$'\r' ]]; do value=${value%?}; done
  printf '%s\n' "$value"
}

if [[ -z ${SSH_PRIVATE_KEY:-} ]]; then
  echo "error: no SSH private key for stack $STACK: add the repository secret named in the workflow" >&2
  exit 1
fi
trim "$SSH_PRIVATE_KEY" | pulumi config set --secret --stack "$STACK" ml-platform:sshPrivateKey
set_keys=sshPrivateKey
if [[ -n ${RKE2_TOKEN:-} ]]; then
  trim "$RKE2_TOKEN" | pulumi config set --secret --stack "$STACK" ml-platform:rke2Token
  set_keys+=", rke2Token"
fi
echo "stack $STACK: set $set_keys (encrypted)"
