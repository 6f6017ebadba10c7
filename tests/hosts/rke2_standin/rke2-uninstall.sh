#!/bin/sh
# Stand-in for rke2-uninstall.sh: stop the units and remove what the installer and RKE2 wrote.
set -eu
systemctl disable --now rke2-server.service rke2-agent.service >/dev/null 2>&1 || true
rm -f /usr/local/lib/systemd/system/rke2-server.service /usr/local/lib/systemd/system/rke2-agent.service
rm -rf /etc/rancher/rke2 /var/lib/rancher/rke2 /usr/local/share/rke2-standin
rm -f /usr/local/bin/rke2 /usr/local/bin/rke2-killall.sh
systemctl daemon-reload
rm -f /usr/local/bin/rke2-uninstall.sh
