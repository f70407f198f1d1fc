#!/usr/bin/env bash
# Second A/B pair, the order reversed (fixed first), same binary.
cd /work/s62/price
for arm in fixed learned; do
  echo "=== $arm start $(date -u +%T)"
  nice -n 10 scripts/soak.sh --minutes 8 --settle-s 60 --service http,echo,bulk \
    --flowlane /work/s62/price-ab/flowlane --rebalance-poll-ms 1000 \
    --service-flags "--move-cost $arm" --out /work/s62/price-ab/${arm}2
  echo "=== $arm end rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
