// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * flowlane's XDP steering program.
 *
 * flowlane shares its interface with the kernel and owns only its ports on its
 * addresses: the listening ports in `fl_ports` and the ephemeral range in
 * `fl_cfg` (the kernel must leave that range alone: the data path refuses to
 * start unless net.ipv4.ip_local_reserved_ports holds it), on the IPv4 and
 * IPv6 addresses in `fl_cfg` where they are set (frames to the interface's
 * other addresses, secondary or link-local, are the kernel's; a family in
 * which flowlane has no address, FL_NO_V4 / FL_NO_V6, is the kernel's
 * whole). Frames addressed to those ports go to the AF_XDP socket of the
 * receive queue they arrived on (XSKMAP indexed by rx_queue_index), and so do
 * the ICMP errors about flowlane's TCP segments (ICMPv4 destination
 * unreachable in IPv4, fragmentation needed among them; ICMPv6 packet too
 * big or destination unreachable in IPv6; quoting a segment from one of
 * those ports). flowlane does not reassemble: the first fragment of a
 * TCP or UDP datagram to its ports (IPv4 offset 0 with MF; an IPv6 Fragment
 * header with offset 0 and M set) is dropped and counted,
 * since the kernel would reassemble it, find no socket and answer with a
 * RST (or ICMP port unreachable) that kills flowlane's connection; the later
 * fragments go to the kernel, whose reassembly expires them silently
 * (without a first fragment it sends no ICMP time exceeded). Everything else
 * (ARP, NDP, other ICMP, other ports and addresses, other fragments, queues
 * beyond the XSKMAP, IPv6 extension-header chains longer than FL_V6_EXT_MAX
 * or holding AH, ESP or a Routing header with segments left, IPv4 headers
 * whose options hold a loose or strict source route not yet finished or do
 * not parse) is passed to the kernel unchanged. IPv6 extension headers and
 * IPv4 options before the upper layer are walked: flowlane's codec walks
 * them too.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "flowlane_common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Keep in sync with ebpf/src/steer.rs. */
struct fl_cfg {
	__u16 eph_lo;   /* first port of flowlane's ephemeral range, 0 = none */
	__u16 eph_hi;   /* last port (inclusive) */
	__u32 flags;    /* FL_DST_V4, FL_DST_V6, FL_NO_V4, FL_NO_V6 */
	__be32 v4;      /* flowlane's IPv4 address, with FL_DST_V4 */
	__u8 v6[16];    /* flowlane's IPv6 address, with FL_DST_V6 */
};

/* Only frames to `v4` (`v6`) are flowlane's; without the flag, any address. */
#define FL_DST_V4 1
#define FL_DST_V6 2
/* flowlane has no address of the family: all of its frames are the kernel's. */
#define FL_NO_V4 4
#define FL_NO_V6 8

/* IPv6 extension headers walked to the upper layer (RFC 8200 §4): Hop-by-Hop
 * Options, Routing, Fragment and Destination Options, at most FL_V6_EXT_MAX
 * of them (a longer chain is the kernel's). */
#define FL_IPPROTO_HOPOPTS 0
#define FL_IPPROTO_ROUTING 43
#define FL_IPPROTO_FRAGMENT 44
#define FL_IPPROTO_DSTOPTS 60
#define FL_V6_EXT_MAX 6
struct fl_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset (13 bits, 8-byte units), 2 reserved, M */
	__be32 identification;
};

/* IPv4 options (RFC 791 §3.1): End of Option List and No Operation are one
 * byte, every other option is type, length (its own bytes, at least 2) and
 * data; the loose and strict source routes' data starts with a pointer (from
 * the option's first byte, 4 for the first address) to the next address,
 * past the option's length once the route is finished. At most 40 bytes of
 * them (IHL 15), so at most 40 options. */
#define FL_IPOPT_END 0
#define FL_IPOPT_NOOP 1
#define FL_IPOPT_LSRR 131
#define FL_IPOPT_SSRR 137
#define FL_IPOPT_MAX 40

struct fl_port_key {
	__u8 proto;     /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
	__u16 port;     /* host byte order */
};

enum fl_stat {
	FL_STAT_REDIRECTED = 0, /* handed to an XSK */
	FL_STAT_PASSED = 1,     /* left to the kernel */
	FL_STAT_NO_SOCKET = 2,  /* ours, but no XSK on this queue: dropped */
	FL_STAT_FRAGMENT_DROPPED = 3, /* first fragment to our port: dropped */
	FL_STAT_MAX = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, FL_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} fl_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fl_cfg);
} fl_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fl_port_key);
	__type(value, __u8);
} fl_ports SEC(".maps");

/* Per-queue, per-CPU counters: index = queue * FL_STAT_MAX + stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FL_MAX_QUEUES * FL_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} fl_stats SEC(".maps");

static __always_inline void count(__u32 queue, __u32 stat)
{
	__u32 idx = (queue % FL_MAX_QUEUES) * FL_STAT_MAX + stat;
	__u64 *v = bpf_map_lookup_elem(&fl_stats, &idx);

	if (v)
		*v += 1;
}

static __always_inline struct fl_cfg *config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&fl_cfg, &zero);
}

static __always_inline int is_ours(struct fl_cfg *cfg, __u8 proto, __u16 port)
{
	struct fl_port_key key = { .proto = proto, .pad = 0, .port = port };

	if (cfg && cfg->eph_lo != 0 && port >= cfg->eph_lo && port <= cfg->eph_hi)
		return 1;
	return bpf_map_lookup_elem(&fl_ports, &key) != 0;
}

/*
 * Whether the `len` bytes of options of the IPv4 header in `ctx`'s frame
 * (plain Ethernet) make the packet the kernel's: a loose or strict source
 * route, finished or not (not finished, its pointer not past its end: this
 * host is not the last destination, as with an IPv6 Routing header with
 * segments left; finished, a TCP must answer along the route reversed, RFC
 * 1122 §4.2.3.8, which flowlane does not: the kernel drops either unless
 * accept_source_route, which a host has off by default), or options that do
 * not parse (the kernel's to answer). Any other option is walked over. The options are copied to the stack
 * first, and the function is a global one, which the verifier checks once,
 * on its own: walked in the packet and inlined, each way through the walk
 * was checked again with the rest of the program (past the verifier's
 * million instructions).
 */
__attribute__((noinline)) int fl_v4_options_kernels(struct xdp_md *ctx, __u64 len)
{
	/* Past `len`: zeros, End of Option List; a long option's length
	 * and pointer read at the last offsets stay inside. */
	__u8 opts[FL_IPOPT_MAX + 4] = {};
	/* 64 bits, as `len`: the verifier's bounds then hold for the
	 * registers indexing `opts` (no zero extension between). */
	__u64 off = 0;

	if (len == 0)
		return 0;
	if (len > FL_IPOPT_MAX)
		return 1;
	/* A frame shorter than its header: the kernel's to drop. */
	if (bpf_xdp_load_bytes(ctx, sizeof(struct ethhdr) + sizeof(struct iphdr), opts, len))
		return 1;
	while (off < len) {
		__u64 type, olen;

		/* Bounds the offset for the verifier (`off < len <= 40`). */
		if (off >= FL_IPOPT_MAX)
			return 0;
		type = opts[off];
		if (type == FL_IPOPT_END)
			return 0;
		if (type == FL_IPOPT_NOOP) {
			off += 1;
			continue;
		}
		olen = opts[off + 1];
		if (olen < 2 || off + olen > len)
			return 1;
		if (type == FL_IPOPT_LSRR || type == FL_IPOPT_SSRR)
			return 1;
		off += olen;
	}
	return 0;
}

/* Whether the IPv6 address at `a` (in the packet) is `b` (four words: no
 * memcmp call in BPF). */
static __always_inline int same_v6(const void *a, const __u8 *b)
{
	const __u32 *x = a;
	const __u32 *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/*
 * Whether the ICMP message at `icmp` is an error about a TCP segment
 * flowlane sent that flowlane acts on: a destination unreachable of an
 * assigned code (ICMPv4 type 3 codes 0 to 15, RFC 792 and RFC 1812
 * §5.2.7.1, code 4 being path MTU's fragmentation needed, RFC 1191;
 * ICMPv6 type 1 codes 0 to 6, RFC 4443 §3.1) or an ICMPv6 packet too big
 * (type 2, RFC 8201), quoting an IP header whose protocol is TCP and a TCP
 * header whose source port is ours. The quote is validated against the
 * connection by flowlane (RFC 5927), not here.
 */
static __always_inline int quotes_our_tcp(struct fl_cfg *cfg, void *icmp, void *data_end, int v6)
{
	__u8 *h = icmp;
	void *quote = icmp + 8;
	void *tcp;
	__u8 proto;

	if (quote > data_end)
		return 0;
	if (v6) {
		struct ipv6hdr *ip6 = quote;

		if (!((h[0] == 2 && h[1] == 0) || (h[0] == 1 && h[1] <= 6)) ||
		    (void *)(ip6 + 1) > data_end)
			return 0;
		proto = ip6->nexthdr;
		tcp = ip6 + 1;
	} else {
		struct iphdr *ip = quote;
		__u32 ihl;

		if (h[0] != 3 || h[1] > 15 || (void *)(ip + 1) > data_end)
			return 0;
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			return 0;
		proto = ip->protocol;
		tcp = quote + ihl;
	}
	if (proto != IPPROTO_TCP || tcp + 8 > data_end)
		return 0;
	return is_ours(cfg, IPPROTO_TCP, bpf_ntohs(*(__u16 *)tcp));
}

SEC("xdp")
int flowlane_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 queue = ctx->rx_queue_index;
	struct ethhdr *eth = data;
	__u8 proto;
	void *l4;

	struct fl_cfg *cfg = config();
	int fragment = 0;
	int v6;

	/* No XSKMAP slot (nor counter) for such a queue: the kernel's. */
	if (queue >= FL_MAX_QUEUES)
		return XDP_PASS;
	if ((void *)(eth + 1) > data_end)
		goto pass;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 ihl;

		if ((void *)(ip + 1) > data_end)
			goto pass;
		if (cfg && (cfg->flags & FL_NO_V4))
			goto pass;
		if (cfg && (cfg->flags & FL_DST_V4) && ip->daddr != cfg->v4)
			goto pass;
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			goto pass;
		/* Options (rare): a source route still under way names a
		 * later destination (RFC 791 §3.1), not flowlane. */
		if (ihl > sizeof(*ip) && fl_v4_options_kernels(ctx, ihl - sizeof(*ip)))
			goto pass;
		/* A fragment (MF set or offset non-zero, RFC 791 §3.2): the
		 * later ones go to the kernel's reassembly, the first (offset
		 * 0, MF set) is looked at below. */
		if (ip->frag_off & bpf_htons(0x1fff))
			goto pass;
		if (ip->frag_off & bpf_htons(0x2000))
			fragment = 1;
		proto = ip->protocol;
		l4 = (void *)ip + ihl;
		v6 = 0;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			goto pass;
		if (cfg && (cfg->flags & FL_NO_V6))
			goto pass;
		if (cfg && (cfg->flags & FL_DST_V6) && !same_v6(&ip6->daddr, cfg->v6))
			goto pass;
		proto = ip6->nexthdr;
		l4 = ip6 + 1;
		/* The extension headers (RFC 8200 §4), walked to the upper
		 * layer: the kernel, handed a segment to flowlane's port
		 * behind Destination Options, would find no socket and reset
		 * flowlane's connection. A later fragment (offset non-zero)
		 * goes to the kernel's reassembly; a first fragment (offset
		 * 0, M set) is walked on and looked at below; an atomic
		 * fragment (offset 0, M clear) is a whole packet (RFC 6946).
		 * A Routing header with segments left names a later
		 * destination, not this host (§4.4): the kernel's. AH and ESP
		 * end the walk (flowlane has no IPsec; the kernel, without a
		 * security association, drops them). */
#pragma unroll
		for (int i = 0; i < FL_V6_EXT_MAX; i++) {
			__u8 *h = l4;
			__u32 len;

			if (proto != FL_IPPROTO_HOPOPTS && proto != FL_IPPROTO_ROUTING &&
			    proto != FL_IPPROTO_FRAGMENT && proto != FL_IPPROTO_DSTOPTS)
				break;
			/* Every one of these headers is at least 8 bytes. */
			if ((void *)(h + 8) > data_end)
				goto pass;
			if (proto == FL_IPPROTO_FRAGMENT) {
				struct fl_frag_hdr *fh = l4;

				if (fh->frag_off & bpf_htons(0xfff8))
					goto pass;
				if (fh->frag_off & bpf_htons(1))
					fragment = 1;
				len = sizeof(*fh);
			} else {
				/* Hop-by-Hop anywhere but first is malformed
				 * (§4.1): the kernel's to answer. */
				if (proto == FL_IPPROTO_HOPOPTS && i != 0)
					goto pass;
				if (proto == FL_IPPROTO_ROUTING && h[3] != 0)
					goto pass;
				len = ((__u32)h[1] + 1) * 8;
			}
			proto = h[0];
			l4 = (void *)h + len;
		}
		if (proto == FL_IPPROTO_HOPOPTS || proto == FL_IPPROTO_ROUTING ||
		    proto == FL_IPPROTO_FRAGMENT || proto == FL_IPPROTO_DSTOPTS)
			goto pass;
		v6 = 1;
	} else {
		goto pass;
	}

	/* The first fragment of a datagram to one of flowlane's ports: the
	 * kernel must not reassemble it (it has no socket there and would
	 * reset flowlane's connection), and flowlane does not: dropped. */
	if (fragment) {
		if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && l4 + 4 <= data_end &&
		    is_ours(cfg, proto, bpf_ntohs(*(__u16 *)(l4 + 2)))) {
			count(queue, FL_STAT_FRAGMENT_DROPPED);
			return XDP_DROP;
		}
		goto pass;
	}

	/* ICMP of the packet's own IP version only (ICMPv6 in IPv4, or ICMPv4
	 * in IPv6, is no path MTU signal: the kernel's). */
	if (proto == (v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP)) {
		if (quotes_our_tcp(cfg, l4, data_end, v6))
			goto redirect;
		goto pass;
	}
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		goto pass;
	/* Both TCP and UDP carry the destination port at offset 2. */
	if (l4 + 4 > data_end)
		goto pass;
	if (!is_ours(cfg, proto, bpf_ntohs(*(__u16 *)(l4 + 2))))
		goto pass;

redirect:
	{
		long ret = bpf_redirect_map(&fl_xsks, queue, XDP_DROP);

		count(queue, ret == XDP_REDIRECT ? FL_STAT_REDIRECTED : FL_STAT_NO_SOCKET);
		return ret;
	}
pass:
	count(queue, FL_STAT_PASSED);
	return XDP_PASS;
}
