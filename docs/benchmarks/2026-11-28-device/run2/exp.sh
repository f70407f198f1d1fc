# run 2 was target/device-kit/exp.sh (session 29): bench handoff --moves 300 --idle 0,100
# --busy 0,4 without and with --busy-poll, then flowlane-ttcp matrix --roles receiver
# --conns 256,1024,10000 --sizes 64k --delays 0 --seconds 3 --latency-sizes none with
# EXP_RX_BUDGET unset (256), 2048, 1024, unset again; EXP_RX_BUDGET was a temporary
# override of dataplane::worker::RX_BUDGET in that kit's binaries only (never committed).
