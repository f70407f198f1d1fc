// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * WAN delay for the test bed, where the kernel has no delaying qdisc
 * (no sch_netem, sch_fq, sch_etf or BPF qdisc on this project's CI VM).
 *
 * The delay itself is a user-space delay line (`flowlane testbed delay`): it
 * holds frames in a FIFO for a fixed time. These programs move frames into
 * and out of it, over a veth pair (line0 <-> line1) in the peer namespace
 * whose line1 end the delay line reads and writes with an AF_PACKET socket:
 *
 *   peer0 tc egress  (kernel -> flowlane) --redirect--> line0 -> line1 -> delay line
 *   peer0 tc ingress (flowlane -> kernel, destination MAC == peer0's)
 *                                         --redirect--> line0 -> line1 -> delay line
 *   delay line -> line1 -> line0 tc ingress: mark, then
 *       destination MAC == peer0's  -> peer0 ingress (as if just received)
 *       otherwise                   -> peer0 egress  (on to flowlane)
 *
 * Returning frames carry FL_DELAY_MARK, so the peer0 hooks pass them on
 * (clearing the mark) to the filters behind them: the impairment
 * (priority 2) and the RSS emulator (priority 3). Frames marked by the
 * impairment (its duplicates) pass too, so they are not delayed twice.
 *
 * Fail-open: the delay line refreshes a heartbeat (CLOCK_MONOTONIC, as
 * bpf_ktime_get_ns) every few milliseconds; when it is older than
 * stale_after_ns (the delay line was killed), frames pass undelayed instead
 * of being redirected into a line nobody reads. Multicast and broadcast
 * frames (ARP requests, neighbour discovery) always pass, and so do frames
 * arriving at peer0 for another MAC: the return program would take them for
 * frames towards flowlane and send them back where they came from.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define FL_MARK_MASK 0xffff0000u
#define FL_MARK_BASE 0x464c0000u  /* "FL": flowlane's test-bed marks */
#define FL_DELAY_MARK 0x464c0001u

/* Keep in sync with ebpf/src/delay_line.rs. */
struct delay_cfg {
	__u32 line_ifindex;    /* line0: where frames enter the delay line */
	__u32 peer_ifindex;    /* peer0: where they come back */
	__u8 peer_mac[6];      /* peer0's MAC: frames for it return to ingress */
	__u8 pad[2];
	__u64 heartbeat_ns;    /* last sign of life of the delay line */
	__u64 stale_after_ns;  /* fail open after this much silence */
};

enum {
	ST_TO_LINE_EGRESS,   /* kernel -> flowlane frames into the line */
	ST_TO_LINE_INGRESS,  /* flowlane -> kernel frames into the line */
	ST_BACK_EGRESS,      /* back from the line, on to flowlane */
	ST_BACK_INGRESS,     /* back from the line, up peer0's stack */
	ST_STALE,            /* passed undelayed: heartbeat stale */
	ST_MAX
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct delay_cfg);
} delay_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} delay_stats SEC(".maps");

static __always_inline void count(__u32 st)
{
	__u64 *v = bpf_map_lookup_elem(&delay_stats, &st);

	if (v)
		*v += 1;
}

static __always_inline struct delay_cfg *config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&delay_cfg, &zero);
}

/* Whether the destination MAC `dst` is peer0's. */
static __always_inline int for_peer(const __u8 *dst, const struct delay_cfg *cfg)
{
	int same = 1;

#pragma unroll
	for (int i = 0; i < 6; i++)
		if (dst[i] != cfg->peer_mac[i])
			same = 0;
	return same;
}

/*
 * Redirects the frame into the line, unless it is for a group
 * (multicast/broadcast) MAC or, with only_for_peer, for a MAC other than
 * peer0's.
 */
static __always_inline int into_line(struct __sk_buff *skb, __u32 st, int only_for_peer)
{
	struct delay_cfg *cfg;
	__u8 dst[6];

	if ((skb->mark & FL_MARK_MASK) == FL_MARK_BASE) {
		if (skb->mark == FL_DELAY_MARK)
			skb->mark = 0;
		return TC_ACT_UNSPEC;
	}
	cfg = config();
	if (!cfg || !cfg->line_ifindex)
		return TC_ACT_UNSPEC;
	if (bpf_skb_load_bytes(skb, 0, dst, sizeof(dst)) || (dst[0] & 1))
		return TC_ACT_UNSPEC;
	if (only_for_peer && !for_peer(dst, cfg))
		return TC_ACT_UNSPEC;
	if (bpf_ktime_get_ns() - cfg->heartbeat_ns > cfg->stale_after_ns) {
		count(ST_STALE);
		return TC_ACT_UNSPEC;
	}
	count(st);
	return bpf_redirect(cfg->line_ifindex, 0);
}

SEC("tc")
int flowlane_delay_egress(struct __sk_buff *skb)
{
	return into_line(skb, ST_TO_LINE_EGRESS, 0);
}

SEC("tc")
int flowlane_delay_ingress(struct __sk_buff *skb)
{
	return into_line(skb, ST_TO_LINE_INGRESS, 1);
}

/* At line0's tc ingress: frames the delay line releases. */
SEC("tc")
int flowlane_delay_return(struct __sk_buff *skb)
{
	struct delay_cfg *cfg = config();
	__u8 dst[6];

	if (!cfg || !cfg->peer_ifindex)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, 0, dst, sizeof(dst)))
		return TC_ACT_SHOT;
	skb->mark = FL_DELAY_MARK;
	if (for_peer(dst, cfg)) {
		count(ST_BACK_INGRESS);
		return bpf_redirect(cfg->peer_ifindex, BPF_F_INGRESS);
	}
	count(ST_BACK_EGRESS);
	return bpf_redirect(cfg->peer_ifindex, 0);
}
