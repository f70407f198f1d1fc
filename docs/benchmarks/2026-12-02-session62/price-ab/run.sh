#!/usr/bin/env bash
# A/B of --move-cost under the soak's churn mix: same binary, one run after the other.
cd /work/s62/price
for arm in learned fixed; do
  echo "=== $arm start $(date -u +%T)"
  nice -n 10 scripts/soak.sh --minutes 8 --settle-s 60 --service http,echo,bulk \
    --flowlane /work/s62/price-ab/flowlane --rebalance-poll-ms 1000 \
    --service-flags "--move-cost $arm" --out /work/s62/price-ab/$arm
  echo "=== $arm end rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
