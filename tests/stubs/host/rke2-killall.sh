#!/bin/sh
# Stub rke2-killall.sh: every RKE2 unit and its containers stopped.
rm -f "$FAKE_DIR"/systemd/active-rke2-*
