// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * A traffic generator for benchmarks: run with BPF_PROG_RUN in live-frames
 * mode (BPF_F_TEST_XDP_LIVE_FRAMES), each run redirects the test frame out of
 * `target_ifindex`. On a veth, the frame arrives on the peer's rx queue
 * (cpu % queues) without touching the sender's kernel stack, so the sender
 * costs far less per packet than a socket would.
 *
 * Two programs:
 * - flowlane_gen sends the frame as it is (`flowlane bench rx`);
 * - flowlane_gen_syn turns each run into a new TCP SYN (`flowlane bench
 *   synflood`): it rewrites the source address (IPv4, or the low 32 bits of
 *   an IPv6 one), the TCP source port and the ISN from a counter, as
 *   xdp-trafficgen's dynamic ports do, so that a flood is a flood and not one
 *   SYN retransmitted.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 target_ifindex = 0;

/* flowlane_gen_syn's ranges (keep in sync with ebpf/src/trafficgen.rs):
 * sources syn_src_first .. + syn_src_count - 1 (host byte order; of an IPv6
 * frame, the source address's last 32 bits, the first 96 kept), source
 * ports syn_port_first .. + syn_port_count - 1. Run n takes source
 * n % syn_src_count and port (n / syn_src_count) % syn_port_count, so that
 * the 4-tuple repeats only after syn_src_count * syn_port_count runs. */
const volatile __u32 syn_src_first = 0;
const volatile __u32 syn_src_count = 1;
const volatile __u32 syn_port_first = 1024;
const volatile __u32 syn_port_count = 1;

/* Runs of flowlane_gen_syn so far (the counter). BPF_PROG_RUN runs a
 * program on the calling CPU only, and one generator has one caller, so a
 * plain increment is enough. */
__u64 syn_runs = 0;

SEC("xdp")
int flowlane_gen(struct xdp_md *ctx)
{
	return bpf_redirect(target_ifindex, 0);
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), a checksum updated for one 16-bit
 * word m that became m'. One's complement sums do not depend on byte order,
 * so the words are used as they lie in the packet. */
static __always_inline __u16 csum_replace16(__u16 hc, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~hc + (__u16)~old + (__u32)new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* The same for a 32-bit field: its two 16-bit words. */
static __always_inline __u16 csum_replace32(__u16 hc, __u32 old, __u32 new)
{
	hc = csum_replace16(hc, (__u16)(old >> 16), (__u16)(new >> 16));
	return csum_replace16(hc, (__u16)old, (__u16)new);
}

/* Run n's source (host byte order), source port and ISN (network byte
 * order). */
static __always_inline void syn_next(__u32 *src, __u16 *port, __u32 *seq)
{
	__u32 n = (__u32)syn_runs++;

	*src = syn_src_first + n % syn_src_count;
	*port = bpf_htons((__u16)(syn_port_first + (n / syn_src_count) % syn_port_count));
	/* Knuth's multiplicative hash: distinct for every n below 2^32. */
	*seq = bpf_htonl(n * 2654435761u);
}

/* The TCP checksum covers the pseudo-header's source address (the 32-bit
 * word `old_src` that becomes `src`), the source port and the sequence
 * number (RFC 9293 §3.1; over IPv6 the pseudo-header of RFC 8200 §8.1). */
static __always_inline void syn_rewrite_tcp(struct tcphdr *tcp, __u32 old_src, __u32 src,
					    __u16 port, __u32 seq)
{
	tcp->check = csum_replace32(tcp->check, old_src, src);
	tcp->check = csum_replace16(tcp->check, tcp->source, port);
	tcp->check = csum_replace32(tcp->check, tcp->seq, seq);
	tcp->source = port;
	tcp->seq = seq;
}

/* An IPv6 SYN: Ethernet (untagged) + IPv6 without extension headers + TCP.
 * IPv6 has no header checksum: only the TCP checksum changes. */
static __always_inline int gen_syn_v6(void *data, void *data_end)
{
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct tcphdr *tcp = (void *)(ip6 + 1);
	__u32 src, seq;
	__u16 port;

	if ((void *)(tcp + 1) > data_end)
		return XDP_ABORTED;
	if (ip6->nexthdr != IPPROTO_TCP)
		return XDP_ABORTED;
	syn_next(&src, &port, &seq);
	src = bpf_htonl(src);
	syn_rewrite_tcp(tcp, ip6->saddr.in6_u.u6_addr32[3], src, port, seq);
	ip6->saddr.in6_u.u6_addr32[3] = src;
	return bpf_redirect(target_ifindex, 0);
}

/* The frame must be Ethernet (untagged) + IPv4 without options + TCP, or
 * Ethernet + IPv6 without extension headers + TCP: what `flowlane bench
 * synflood` builds. Live frames are recycled holding what the last run
 * wrote, so the old values are read from the frame itself and the checksums
 * are updated from them (never recomputed from scratch): the frame stays
 * valid whichever run last touched it. */
SEC("xdp")
int flowlane_gen_syn(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *tcp = (void *)(ip + 1);
	__u32 src, seq;
	__u16 port;

	if ((void *)(eth + 1) > data_end)
		return XDP_ABORTED;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return gen_syn_v6(data, data_end);
	if ((void *)(tcp + 1) > data_end)
		return XDP_ABORTED;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_TCP)
		return XDP_ABORTED;

	syn_next(&src, &port, &seq);
	src = bpf_htonl(src);
	/* The IPv4 header checksum covers the source address (RFC 791). */
	ip->check = csum_replace32(ip->check, ip->saddr, src);
	syn_rewrite_tcp(tcp, ip->saddr, src, port, seq);
	ip->saddr = src;
	return bpf_redirect(target_ifindex, 0);
}
