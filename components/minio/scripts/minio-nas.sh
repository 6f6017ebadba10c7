#!/usr/bin/env bash
# Tier 3 on one NAS host: the MinIO (or fork) server binary from a pinned artifact, its XFS drives,
# the env file, TLS material, the systemd unit, and a health check through the cluster endpoint.
#
# Parameters:
#   ARTIFACT_URL, ARTIFACT_SHA256  the server binary and its sha256 (storage.minio.artifact); the
#                                  download is checked before anything on the host is changed
#   BINARY, SERVICE                binary name in /usr/local/bin and systemd unit name (minio, or silo)
#   DRIVES                         space-separated DEVICE=ACTION in MinIO order; drive i mounts at
#                                  MOUNT_ROOT/drive<i>, ACTION one of
#                                    keep          never format (the drive must already be this slot's)
#                                    format        format it as XFS if it holds no signature at all
#                                    format-force  also wipe a drive holding other data (never a mounted one)
#   MOUNT_ROOT                     storage.minio.mountRoot
#   ENV_FILE                       the non-secret lines of /etc/default/<service> (identical on every host)
#   HEALTH_URL                     https://<this host>:<port>/minio/health/cluster
#   HEALTH_TIMEOUT                 seconds to wait for write quorum (the other hosts start in parallel)
#   HOST_ROOT                      tests only: prefix of every file this script writes
# Packages it uses and installs when missing (apt or dnf): xfsprogs, curl, chrony (MinIO refuses
# requests between hosts whose clocks differ by more than 15 minutes).
# Standard input: lines "NAME BASE64" for ROOT_USER, ROOT_PASSWORD, TLS_CERT, TLS_KEY, CA_CERT
# (secrets travel on stdin, never on a command line).
#
# A drive this script formatted carries the XFS label mlminio-dNN (NN = its slot) and is never
# formatted again; a drive carrying another slot's label is refused (MinIO's drive order must never
# change). Parity, set size and volumes of a deployment that holds data are never changed.
# Not safe to interrupt inside mkfs.xfs: a drive cut off there can carry its label on an incomplete
# filesystem, which a re-run cannot tell from its own; recovery in docs/runbook.md, section 6.
set -euo pipefail

: "${ARTIFACT_URL:?}" "${ARTIFACT_SHA256:?}" "${BINARY:?}" "${SERVICE:?}" "${DRIVES:?}" "${MOUNT_ROOT:?}"
: "${ENV_FILE:?}" "${HEALTH_URL:?}" "${HEALTH_TIMEOUT:=600}"
HOST_ROOT=${HOST_ROOT:-}
SERVICE_USER=minio-user
BIN_PATH=/usr/local/bin/$BINARY
ENV_PATH=/etc/default/$SERVICE
CERTS_DIR=/etc/$SERVICE/certs
UNIT_PATH=/etc/systemd/system/$SERVICE.service
FSTAB=$HOST_ROOT/etc/fstab
# Which service and binary run the deployment on these drives: a renamed service must not start a
# second server on the same drives while the first one still runs.
DEPLOYED=$HOST_ROOT/var/lib/ml-platform/minio-deployment
# Settings MinIO fixes when a deployment is first started: changing them later corrupts nothing only
# because MinIO refuses or ignores them; say so instead of restarting into an error.
FIXED_KEYS=(MINIO_VOLUMES MINIO_STORAGE_CLASS_STANDARD MINIO_ERASURE_SET_DRIVE_COUNT)

problems=0
# Marked pending before each change it needs (lib.sh, apply_pending): a cut run restarts when run again.
restart=restart-$SERVICE
declare -A secret=()

refuse() {
  echo "refused: $*" >&2
  problems=$((problems + 1))
}

read_secrets() {
  local name value
  while read -r name value; do
    [[ -n $name ]] && secret[$name]=$(base64 -d <<<"$value")
  done
  for name in ROOT_USER ROOT_PASSWORD TLS_CERT TLS_KEY CA_CERT; do
    [[ -n ${secret[$name]:-} ]] || fail "standard input lacks $name"
  done
}

# download_artifact: the binary in a temp file, verified; prints its path ("" when already installed).
download_artifact() {
  local tmp actual
  if [[ -f $HOST_ROOT$BIN_PATH ]] && [[ $(sha256sum "$HOST_ROOT$BIN_PATH" | cut -d' ' -f1) == "$ARTIFACT_SHA256" ]]; then
    return 0
  fi
  tmp=$(mktemp)
  curl -fsSL --retry 3 --connect-timeout 20 --max-time 1800 -o "$tmp" "$ARTIFACT_URL" ||
    fail "could not download $ARTIFACT_URL"
  actual=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [[ $actual != "$ARTIFACT_SHA256" ]]; then
    rm -f "$tmp"
    fail "the file at $ARTIFACT_URL has sha256 $actual, not $ARTIFACT_SHA256 (storage.minio.artifact.sha256); nothing was installed. Fix the mirror or the setting"
  fi
  echo "$tmp"
}

env_value() { sed -n "s/^$1=//p" <<<"$2"; }

install_packages() {
  if command -v apt-get >/dev/null 2>&1; then
    ensure_packages debian xfsprogs curl chrony
  elif command -v dnf >/dev/null 2>&1; then
    ensure_packages rhel xfsprogs curl chrony
  else
    fail "neither apt-get nor dnf found: install xfsprogs, curl and chrony on this NAS host, then run the step again"
  fi
}

# guard_renamed_service: the service or binary name changed (e.g. minio -> silo). The old unit
# must be stopped and disabled by hand first; then the fixed settings are checked against its env file.
guard_renamed_service() {
  local old_service old_binary
  old_env_path=$ENV_PATH
  [[ -f $DEPLOYED ]] || return 0
  read -r old_service old_binary <"$DEPLOYED"
  [[ $old_service == "$SERVICE" && $old_binary == "$BINARY" ]] && return 0
  if systemctl is-active --quiet "$old_service" || systemctl is-enabled --quiet "$old_service"; then
    fail "these drives are served by $old_service ($old_binary), and the settings ask for $SERVICE ($BINARY): starting it now would run two servers on the same drives. On every NAS host first run 'systemctl disable --now $old_service', then run the step again (docs/minio-tier.md, 'Moving to a fork')"
  fi
  old_env_path=/etc/default/$old_service
}

# guard_fixed_settings: refuse to change what MinIO fixed at first start, once drives hold data.
guard_fixed_settings() {
  local current key old new
  [[ -f $HOST_ROOT$old_env_path ]] || return 0
  current=$(cat "$HOST_ROOT$old_env_path")
  compgen -G "$HOST_ROOT$MOUNT_ROOT/drive*/data/.minio.sys" >/dev/null || return 0
  for key in "${FIXED_KEYS[@]}"; do
    old=$(env_value "$key" "$current")
    new=$(env_value "$key" "$ENV_FILE")
    if [[ $old != "$new" ]]; then
      fail "$key is '$old' in the running deployment and the settings ask for '$new'. MinIO fixes the erasure layout (volumes, set size) and parity when it is first started with data; changing it here would not re-encode existing objects and can leave the deployment unable to start. Set storage.minio back to the deployed values; to change the layout, build a new deployment (or pool) and copy the data (docs/minio-tier.md)"
    fi
  done
}

ensure_user() {
  id "$SERVICE_USER" >/dev/null 2>&1 && return 0
  useradd --system --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
  changed "created user $SERVICE_USER"
}

probe() {
  local out rc=0
  out=$(blkid -p -o export "$1") || rc=$?
  if ((rc == 2)); then
    out=""
  elif ((rc != 0)); then
    fail "blkid could not probe $1 (exit $rc); inspect it with wipefs -n $1"
  fi
  fs_type=$(sed -n 's/^TYPE=//p' <<<"$out")
  fs_uuid=$(sed -n 's/^UUID=//p' <<<"$out")
  fs_label=$(sed -n 's/^LABEL=//p' <<<"$out")
  pt_type=$(sed -n 's/^PTTYPE=//p' <<<"$out")
}

ensure_fstab() {
  local mnt=$1 line=$2 current="" others
  [[ -f $FSTAB ]] && current=$(cat "$FSTAB")
  grep -qxF -- "$line" <<<"$current" && return 0
  others=$(awk -v mnt="$mnt" '$2 != mnt' <<<"$current")
  write_file "$FSTAB" 0644 "${others:+$others$'\n'}$line" daemon-reload || true
}

# handle_drive SLOT DEVICE ACTION
handle_drive() {
  local slot=$1 dev=$2 action=$3 real label mnt mounts elsewhere occupant
  label=$(printf 'mlminio-d%02d' "$slot")
  mnt="$MOUNT_ROOT/drive$slot"
  real=$(readlink -f -- "$dev")
  if ! lsblk -dn -o TYPE -- "$real" >/dev/null 2>&1; then
    refuse "drive $slot: $dev is not a block device on this host; fix nas.hosts[].drives"
    return 0
  fi
  probe "$real"
  if [[ $fs_label == mlminio-d* && $fs_label != "$label" ]]; then
    refuse "drive $slot: $dev carries $fs_label, another slot's MinIO drive; MinIO's drive order must never change: restore the order in nas.hosts[].drives"
    return 0
  fi
  mounts=$(lsblk -n -o MOUNTPOINT -- "$real" | sed '/^$/d' | sort -u)
  elsewhere=$(grep -vxF -- "$mnt" <<<"$mounts" || true)
  if [[ -n $elsewhere ]]; then
    refuse "drive $slot: $dev is mounted at $(tr '\n' ' ' <<<"$elsewhere"); unmount it or remove it from the list"
    return 0
  fi
  # A drive swapped in this slot: the old one may still be mounted here (a dead mount after the swap).
  # Mounting on top would hide it and keep its writes pending; the operator unmounts it on purpose.
  occupant=$(findmnt -n -o SOURCE --mountpoint "$mnt" || true)
  if [[ -n $occupant && $(readlink -f -- "$occupant") != "$real" ]]; then
    refuse "drive $slot: $mnt still has $occupant mounted (the drive $dev replaces?); unmount it on the host ('umount $mnt'; MinIO keeps serving from the other drives), then run the step again"
    return 0
  fi
  if [[ $fs_label == "$label" && $fs_type == xfs ]]; then
    : # this slot's drive, formatted by this script before: never again
  elif [[ -z $fs_type && -z $pt_type ]]; then
    if [[ $action == keep ]]; then
      refuse "drive $slot: $dev is blank and not marked format: true; mark it to have it formatted"
      return 0
    fi
    format_drive "$dev" "$real" "$label"
  elif [[ $action == format-force ]]; then
    note "drive $slot: $dev holds ${fs_type:-a $pt_type partition table}; wiping it because force: true"
    wipefs -a -- "$real" >/dev/null
    changed "wiped the signatures on $dev"
    format_drive "$dev" "$real" "$label"
  else
    refuse "drive $slot: $dev holds ${fs_type:-a $pt_type partition table} and is not a MinIO drive of this program; MinIO needs empty drives: check what is on it, then set format: true and force: true to wipe it, or list another drive"
    return 0
  fi
  mount_drive "$dev" "$real" "$mnt" "$mounts"
}

format_drive() {
  mkfs.xfs -q -L "$3" "$2"
  changed "formatted $1 as xfs ($3)"
}

mount_drive() {
  local dev=$1 real=$2 mnt=$3 mounts=$4
  probe "$real"
  # nofail: a dead drive must not stop the host from booting (MinIO then reports that drive offline:
  # it writes into driveN/data, which is absent without the drive); the device wait is bounded.
  ensure_fstab "$mnt" "UUID=$fs_uuid $mnt xfs defaults,noatime,nofail,x-systemd.device-timeout=30s 0 2"
  if [[ ! -d $HOST_ROOT$mnt ]]; then
    install -d -m 0755 "$HOST_ROOT$mnt"
    changed "created $mnt"
  fi
  if ! grep -qxF -- "$mnt" <<<"$mounts"; then
    mount -t xfs -o noatime "$real" "$mnt"
    changed "mounted $dev at $mnt"
  fi
  # MinIO writes into a directory on the drive: if the drive is ever missing, the directory is too,
  # and MinIO reports the drive offline instead of filling the root filesystem.
  if [[ ! -d $HOST_ROOT$mnt/data ]]; then
    install -d -m 0750 "$HOST_ROOT$mnt/data"
    chown "$SERVICE_USER:$SERVICE_USER" "$HOST_ROOT$mnt/data"
    changed "created $mnt/data"
  fi
}

write_tls() {
  local dir=$HOST_ROOT$CERTS_DIR
  install -d -m 0750 "$dir" "$dir/CAs"
  write_file "$dir/public.crt" 0644 "${secret[TLS_CERT]}" "$restart" || true
  write_file "$dir/private.key" 0600 "${secret[TLS_KEY]}" "$restart" || true
  write_file "$dir/CAs/ca.crt" 0644 "${secret[CA_CERT]}" "$restart" || true
  chown -R "$SERVICE_USER:$SERVICE_USER" "$HOST_ROOT/etc/$SERVICE"
}

# The unit of MinIO's own packages (minio/minio-service linux-systemd), with the names configurable.
unit_text() {
  cat <<EOF
[Unit]
Description=$SERVICE object storage (ml-platform tier 3)
Wants=network-online.target
After=network-online.target
AssertFileIsExecutable=$BIN_PATH

[Service]
Type=notify
WorkingDirectory=/usr/local
User=$SERVICE_USER
Group=$SERVICE_USER
ProtectProc=invisible
EnvironmentFile=$ENV_PATH
ExecStart=$BIN_PATH server \$MINIO_OPTS \$MINIO_VOLUMES
Restart=always
LimitNOFILE=1048576
MemoryAccounting=no
TasksMax=infinity
# Bounded: a server that never reports ready fails its start instead of hanging systemctl and this
# step. A stop still never SIGKILLs MinIO (upstream: SendSIGKILL=no), it gives up waiting after 5 min.
TimeoutStartSec=600
TimeoutStopSec=300
OOMScoreAdjust=-1000
SendSIGKILL=no

[Install]
WantedBy=multi-user.target
EOF
}

read_secrets
install_packages
artifact=$(download_artifact)
guard_renamed_service
guard_fixed_settings

read -ra entries <<<"$DRIVES"
ensure_user
slot=0
for entry in "${entries[@]}"; do
  slot=$((slot + 1))
  case ${entry##*=} in
    keep | format | format-force) handle_drive "$slot" "${entry%=*}" "${entry##*=}" ;;
    *) fail "DRIVES entry '$entry': action must be keep, format or format-force" ;;
  esac
done
apply_pending daemon-reload "reloaded systemd's units (fstab)" systemctl daemon-reload || true
if ((problems > 0)); then
  fail "$problems drive(s) not set up as the settings say; see the 'refused:' lines above. MinIO was not (re)started"
fi

if [[ -n $artifact ]]; then
  pending_set "$restart"
  err=$(install -D -m 0755 "$artifact" "$HOST_ROOT$BIN_PATH" 2>&1) || io_fail "install $BIN_PATH" "$HOST_ROOT$BIN_PATH" "$err"
  rm -f "$artifact"
  changed "installed $BIN_PATH ($ARTIFACT_SHA256)"
fi
write_file "$HOST_ROOT$ENV_PATH" 0600 "$ENV_FILE
MINIO_ROOT_USER=${secret[ROOT_USER]}
MINIO_ROOT_PASSWORD=${secret[ROOT_PASSWORD]}" "$restart" || true
echo "env file sha256 (compare across NAS hosts): $(sha256sum "$HOST_ROOT$ENV_PATH" | cut -d' ' -f1)"
write_tls
write_file "$HOST_ROOT$UNIT_PATH" 0644 "$(unit_text)" daemon-reload "$restart" || true
apply_pending daemon-reload "reloaded systemd's units ($SERVICE.service)" systemctl daemon-reload || true

write_file "$DEPLOYED" 0644 "$SERVICE $BINARY" || true
# --no-block: with Type=notify a start waits for MinIO's ready message, which needs the other hosts;
# the health wait below is the bounded check.
if ! systemctl is-enabled --quiet "$SERVICE"; then
  mark "before start-$SERVICE"
  systemctl enable --now --no-block "$SERVICE" || fail "could not enable and start $SERVICE"
  pending_clear "$restart"
  changed "enabled and started $SERVICE"
else
  systemctl is-active --quiet "$SERVICE" || pending_set "$restart"
  apply_pending "$restart" "restarted $SERVICE" systemctl restart --no-block "$SERVICE" || true
fi
# 200 only when the deployment has write quorum: the other NAS hosts start in parallel.
wait_until "$HEALTH_TIMEOUT" "$HEALTH_URL (write quorum)" \
  curl -fsS --connect-timeout 5 --max-time 10 --cacert "$HOST_ROOT$CERTS_DIR/CAs/ca.crt" "$HEALTH_URL"
