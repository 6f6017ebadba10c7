#!/usr/bin/env bash
# Runs on the init server once RKE2 runs there: print the SHA-256 of the cluster's server CA
# certificate, the PEM file as stored on disk. That is the hash RKE2's secure join tokens carry
# (`K10<hash>::server:...`, `K10<hash>::node:...`): a joining node compares it with the CA that
# `/cacerts` presents before it sends its password. A certificate's hash, not a secret.
# Only RKE2's self-signed CA: with custom CA certificates RKE2 hashes the root's DER encoding instead.
# Parameters: HOST_ROOT (tests only: prefix of the path it reads)
set -euo pipefail
ca=${HOST_ROOT:-}/var/lib/rancher/rke2/server/tls/server-ca.crt
[[ -s $ca ]] || fail "no cluster CA at /var/lib/rancher/rke2/server/tls/server-ca.crt: RKE2 does not run as a server here"
sha256sum "$ca" | cut -d' ' -f1
