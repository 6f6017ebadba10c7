#!/bin/sh
# Stand-in for RKE2's installer (get.rke2.io), served by the host harness's artifact server
# (tests/hosts/standins.py). Like the real one with INSTALL_RKE2_METHOD=tar and INSTALL_RKE2_ARTIFACT_URL:
# download the checksums and the tarball from the artifact URL, verify, unpack into /usr/local.
set -eu
: "${INSTALL_RKE2_ARTIFACT_URL:?the stand-in installer needs INSTALL_RKE2_ARTIFACT_URL}"
[ "${INSTALL_RKE2_METHOD:-tar}" = tar ] || { echo "stand-in installer: only the tar method" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -sfL "$INSTALL_RKE2_ARTIFACT_URL/sha256sum-amd64.txt" -o "$tmp/sums"
curl -sfL "$INSTALL_RKE2_ARTIFACT_URL/rke2.linux-amd64.tar.gz" -o "$tmp/rke2.linux-amd64.tar.gz"
(cd "$tmp" && grep ' rke2.linux-amd64.tar.gz$' sums | sha256sum -c - >/dev/null)
tar -xzf "$tmp/rke2.linux-amd64.tar.gz" -C /usr/local
systemctl daemon-reload
echo "[INFO]  stand-in RKE2 ${INSTALL_RKE2_VERSION:-} installed into /usr/local"
