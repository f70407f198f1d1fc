// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * A traffic generator for benchmarks: run with BPF_PROG_RUN in live-frames
 * mode (BPF_F_TEST_XDP_LIVE_FRAMES), each run redirects the test frame out of
 * `target_ifindex`. On a veth, the frame arrives on the peer's rx queue
 * (cpu % queues) without touching the sender's kernel stack, so the sender
 * costs far less per packet than a socket would.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 target_ifindex = 0;

SEC("xdp")
int flowlane_gen(struct xdp_md *ctx)
{
	return bpf_redirect(target_ifindex, 0);
}
