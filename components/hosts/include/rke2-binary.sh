rke2_bin=""
for bin in "$HOST_ROOT"{/usr/local/bin,/opt/rke2/bin,/usr/bin}/rke2; do
  if [[ -x $bin ]]; then
    rke2_bin=$bin
    break
  fi
done
