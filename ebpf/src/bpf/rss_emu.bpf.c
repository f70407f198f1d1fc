// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * The emulated RSS NIC of flowlane's veth test bed.
 *
 * Attached at tc egress of the far (kernel-stack) side of the veth pair, it
 * computes what an RSS-capable NIC computes on receive — the Toeplitz hash of
 * the packet's addresses and ports under a secret key, `hash % table_size`
 * as an index into the indirection table — and sends the packet to the
 * receive queue found there.
 *
 * How the queue is chosen: veth delivers a frame to the peer's rx queue equal
 * to the sender's tx queue. With XPS off, the tx queue of an skb whose
 * queue_mapping is non-zero is "recorded rx queue" = queue_mapping - 1
 * (skb_tx_hash), so writing q + 1 selects tx queue q and therefore rx queue q.
 *
 * Next-packet semantics: netdev_pick_tx, which runs after tc egress, takes
 * skb_tx_hash only when the skb carries no socket, or a socket without a
 * cached tx queue (sk_tx_queue_mapping), or skb->ooo_okay. Otherwise it
 * reuses the socket's cached queue: a connected UDP socket (never
 * ooo_okay) or a TCP socket with packets in a queue would stay on the
 * queue of the table before a rewrite, where an RSS NIC applies the
 * rewrite to the next packet. So a packet that carries a socket is sent
 * as a clone, which carries none (skb_clone), back through this device's
 * egress, and the original is consumed. The clone is marked FL_RSS_MARK:
 * the delay-line and impairment hooks ahead of this one pass marked
 * frames, and this program clears the mark and lets it go. (On Linux 6.18
 * a veth crossing into another namespace keeps skb->sk, so a hop in a
 * further namespace would need the same clone.) What the clone's
 * transmission returns is the original's fate: a drop is reported to the
 * sender as the device would report it.
 *
 * The hash input follows the Microsoft RSS specification ("RSS hashing
 * types"): source address, destination address, source port, destination
 * port, all in network byte order; ports only for TCP/UDP and unfragmented
 * packets, and only where the configured hash fields ask for them.
 *
 * Which packets have ports mirrors flowlane's own model of the NIC
 * (wire::peek::tcp_endpoints, which the bucket counters and a move's look
 * ahead use), so that the two put a flow in the same bucket: up to two VLAN
 * tags (802.1ad or 802.1Q outer, 802.1Q inner) before the EtherType; IPv4
 * that is no fragment, with a header of at least five words and the ports
 * within its total length; IPv6 with the upper layer next, or behind up to
 * FL_V6_EXT_MAX Hop-by-Hop (first only), Routing (no segments left),
 * Destination Options and atomic Fragment headers (RFC 8200 §4, RFC 6946),
 * the ports within its payload length, as xdp_steer walks them. Anything
 * else an IP packet carries is hashed on its addresses (a real fragment, a
 * chain too long or malformed, AH or ESP). A frame that is not IP (ARP, more
 * than two tags, an IP header cut short) is not hashed: queue 0, as on
 * hardware, counted there.
 *
 * Configuration updates are atomic for the program: the configuration has
 * two slots and `rss_active` names the one in force; a writer fills the
 * other slot and then flips the index (one 32-bit store), so no packet sees
 * a key half-written. (A second rewrite within the few hundred nanoseconds
 * that one packet takes to read its slot could still overlap that packet.)
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "flowlane_common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Which protocols include their ports in the hash input (ethtool rx-flow-hash
 * "sdfn" versus "sd"). Keep in sync with ebpf/src/rss_emu.rs. */
#define FL_HASH_TCP4_PORTS (1u << 0)
#define FL_HASH_UDP4_PORTS (1u << 1)
#define FL_HASH_TCP6_PORTS (1u << 2)
#define FL_HASH_UDP6_PORTS (1u << 3)

/* The clone this program sends in place of a packet that carries a socket
 * ("FL" marks: the impairment uses 0x464c0000, the delay line 0x464c0001). */
#define FL_RSS_MARK 0x464c0002u

/* dev_queue_xmit's results (include/linux/netdevice.h, not UAPI). */
#define FL_NET_XMIT_DROP 1
#define FL_NET_XMIT_CN 2

/* VLAN tag protocol identifiers (802.1Q, 802.1ad). */
#define FL_ETH_P_8021Q 0x8100
#define FL_ETH_P_8021AD 0x88a8

/* IPv6 extension headers walked to the upper layer (RFC 8200 §4), at most
 * FL_V6_EXT_MAX of them: as xdp_steer.bpf.c walks them. */
#define FL_IPPROTO_HOPOPTS 0
#define FL_IPPROTO_ROUTING 43
#define FL_IPPROTO_FRAGMENT 44
#define FL_IPPROTO_DSTOPTS 60
#define FL_V6_EXT_MAX 6

/* Configuration slots: `rss_active` names the one in force. */
#define FL_CFG_SLOTS 2

struct rss_cfg {
	__u32 enabled;     /* 0: leave queue selection to the kernel */
	__u32 key_len;     /* bytes of key in use */
	__u32 table_size;  /* power of two, <= FL_MAX_TABLE */
	__u32 hash_fields; /* FL_HASH_* */
	__u32 queues;      /* the veth's queue count: the table names fewer */
	__u8 key[FL_MAX_KEY];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FL_CFG_SLOTS);
	__type(key, __u32);
	__type(value, struct rss_cfg);
} rss_cfg SEC(".maps");

/* Which slot of rss_cfg is in force (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rss_active SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FL_MAX_TABLE);
	__type(key, __u32);
	__type(value, __u32);
} rss_table SEC(".maps");

/* Per-CPU packet count per queue chosen, for `flowlane testbed status`. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FL_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u64);
} rss_queue_packets SEC(".maps");

struct hash_input {
	__u8 bytes[FL_MAX_HASH_INPUT];
	__u32 len;
};

/* Microsoft RSS spec, "Verifying the RSS Hash Calculation": for each set bit
 * of the input, from the most significant bit of the first byte, XOR in the
 * 32 bits of the key that start at that bit position. `window` holds those
 * 32 key bits and slides one bit left per input bit. */
static __always_inline __u32 toeplitz(const struct rss_cfg *cfg, const struct hash_input *in)
{
	__u32 window = ((__u32)cfg->key[0] << 24) | ((__u32)cfg->key[1] << 16) |
		       ((__u32)cfg->key[2] << 8) | cfg->key[3];
	__u32 hash = 0;
	__u32 i, bit;

	for (i = 0; i < FL_MAX_HASH_INPUT; i++) {
		__u8 byte, next;

		if (i >= in->len)
			break;
		byte = in->bytes[i];
		next = (i + 4 < cfg->key_len && i + 4 < FL_MAX_KEY) ? cfg->key[i + 4] : 0;
		for (bit = 0; bit < 8; bit++) {
			if (byte & (0x80 >> bit))
				hash ^= window;
			window = (window << 1) | ((next >> (7 - bit)) & 1);
		}
	}
	return hash;
}

static __always_inline int load(struct __sk_buff *skb, __u32 off, void *to, __u32 len)
{
	return bpf_skb_load_bytes(skb, off, to, len);
}

/* Sends a steered packet so that its queue_mapping decides its tx queue
 * (see "Next-packet semantics" above). */
static __always_inline int send_steered(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	long ret;

	if (!skb->sk)
		return TC_ACT_OK;
	skb->mark = FL_RSS_MARK;
	ret = bpf_clone_redirect(skb, skb->ifindex, 0);
	if (ret == 0 || ret == FL_NET_XMIT_CN)
		return TC_ACT_STOLEN;
	if (ret > 0)
		return TC_ACT_SHOT;
	/* No clone (no memory, nested too deep): the original goes, with
	 * the socket's cached queue if it has one. */
	skb->mark = mark;
	return TC_ACT_OK;
}

/* The configuration in force. */
static __always_inline struct rss_cfg *active_cfg(void)
{
	__u32 zero = 0;
	__u32 *active = bpf_map_lookup_elem(&rss_active, &zero);
	__u32 slot;

	if (!active)
		return NULL;
	slot = *active & (FL_CFG_SLOTS - 1);
	return bpf_map_lookup_elem(&rss_cfg, &slot);
}

static __always_inline int is_v6_ext(__u8 proto)
{
	return proto == FL_IPPROTO_HOPOPTS || proto == FL_IPPROTO_ROUTING ||
	       proto == FL_IPPROTO_FRAGMENT || proto == FL_IPPROTO_DSTOPTS;
}

/* Where the ports of the IPv6 packet whose fixed header `ip6` starts at `l3`
 * are, walking its extension headers, or 0 where it has none to hash (see
 * the top of this file); its upper-layer protocol in `*proto`. */
static __always_inline __u32 v6_ports_at(struct __sk_buff *skb, __u32 l3,
					 const struct ipv6hdr *ip6, __u8 *proto)
{
	__u32 l4 = l3 + sizeof(*ip6);
	__u32 end = l4 + bpf_ntohs(ip6->payload_len);
	__u8 next = ip6->nexthdr;
	int i;

#pragma unroll
	for (i = 0; i < FL_V6_EXT_MAX; i++) {
		__u8 h[4];
		__u32 len;

		if (!is_v6_ext(next))
			break;
		if (load(skb, l4, h, sizeof(h)))
			return 0;
		if (next == FL_IPPROTO_FRAGMENT) {
			/* Offset (13 bits) and M: only an atomic fragment,
			 * a whole packet, has ports to hash. */
			if (((__u16)h[2] << 8 | h[3]) & 0xfff9)
				return 0;
			len = 8;
		} else {
			/* Hop-by-Hop anywhere but first is malformed
			 * (§4.1); a Routing header with segments left names
			 * a later destination (§4.4). */
			if (next == FL_IPPROTO_HOPOPTS && i != 0)
				return 0;
			if (next == FL_IPPROTO_ROUTING && h[3] != 0)
				return 0;
			len = ((__u32)h[1] + 1) * 8;
		}
		next = h[0];
		l4 += len;
	}
	if (is_v6_ext(next))
		return 0;
	*proto = next;
	/* The ports within the payload (RFC 8200 §3). */
	if (l4 + 4 > end)
		return 0;
	return l4;
}

/* The RSS hash of `skb` under `cfg` in `*hash`: 0 when hashed, -1 for a
 * frame that is not IP (not hashed). */
static __always_inline int rss_hash(struct __sk_buff *skb, const struct rss_cfg *cfg,
				    __u32 *hash)
{
	struct hash_input in = {};
	__u32 l3 = ETH_HLEN;
	__u32 l4 = 0;
	int ports = 0;
	__u16 eth_proto;

	if (load(skb, 12, &eth_proto, 2))
		return -1;
	/* Up to two VLAN tags: 802.1ad or 802.1Q outer, 802.1Q inner. */
	if (eth_proto == bpf_htons(FL_ETH_P_8021Q) || eth_proto == bpf_htons(FL_ETH_P_8021AD)) {
		if (load(skb, l3 + 2, &eth_proto, 2))
			return -1;
		l3 += 4;
		if (eth_proto == bpf_htons(FL_ETH_P_8021Q)) {
			if (load(skb, l3 + 2, &eth_proto, 2))
				return -1;
			l3 += 4;
		}
	}

	if (eth_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		__u32 ihl;

		if (load(skb, l3, &ip, sizeof(ip)))
			return -1;
		__builtin_memcpy(in.bytes, &ip.saddr, 4);
		__builtin_memcpy(in.bytes + 4, &ip.daddr, 4);
		in.len = 8;
		ihl = ip.ihl * 4;
		/* No fragment (MF or an offset), a whole header, the ports
		 * within the datagram (RFC 791 §3.1). */
		if (!(ip.frag_off & bpf_htons(0x3fff)) && ihl >= sizeof(ip) &&
		    bpf_ntohs(ip.tot_len) >= ihl + 4) {
			if (ip.protocol == IPPROTO_TCP)
				ports = cfg->hash_fields & FL_HASH_TCP4_PORTS;
			else if (ip.protocol == IPPROTO_UDP)
				ports = cfg->hash_fields & FL_HASH_UDP4_PORTS;
		}
		l4 = l3 + ihl;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		__u8 proto = 0;

		if (load(skb, l3, &ip6, sizeof(ip6)))
			return -1;
		__builtin_memcpy(in.bytes, &ip6.saddr, 16);
		__builtin_memcpy(in.bytes + 16, &ip6.daddr, 16);
		in.len = 32;
		l4 = v6_ports_at(skb, l3, &ip6, &proto);
		if (l4) {
			if (proto == IPPROTO_TCP)
				ports = cfg->hash_fields & FL_HASH_TCP6_PORTS;
			else if (proto == IPPROTO_UDP)
				ports = cfg->hash_fields & FL_HASH_UDP6_PORTS;
		}
	} else {
		return -1;
	}

	/* Ports the frame does not hold: the addresses alone. */
	if (ports) {
		__u8 p[4];

		if (load(skb, l4, p, 4) == 0) {
			if (in.len == 8)
				__builtin_memcpy(in.bytes + 8, p, 4);
			else
				__builtin_memcpy(in.bytes + 32, p, 4);
			in.len += 4;
		}
	}
	*hash = toeplitz(cfg, &in);
	return 0;
}

static __always_inline void count(__u32 q)
{
	__u64 *n = bpf_map_lookup_elem(&rss_queue_packets, &q);

	if (n)
		*n += 1;
}

SEC("tc")
int flowlane_rss(struct __sk_buff *skb)
{
	struct rss_cfg *cfg;
	__u32 hash, bucket, q;
	__u32 *queue;

	if (skb->mark == FL_RSS_MARK) {
		/* Our clone, steered already. */
		skb->mark = 0;
		return TC_ACT_OK;
	}
	cfg = active_cfg();
	if (!cfg || !cfg->enabled || cfg->table_size == 0)
		return TC_ACT_OK;

	if (rss_hash(skb, cfg, &hash)) {
		/* Not IP (ARP): not hashed, queue 0, as on hardware. */
		skb->queue_mapping = 1;
		count(0);
		return send_steered(skb);
	}
	bucket = hash & (cfg->table_size - 1) & (FL_MAX_TABLE - 1);
	queue = bpf_map_lookup_elem(&rss_table, &bucket);
	if (!queue)
		return TC_ACT_OK;
	q = *queue % FL_MAX_QUEUES;
	skb->queue_mapping = q + 1;
	bpf_set_hash(skb, hash);
	count(q);
	return send_steered(skb);
}

/* For BPF_PROG_TEST_RUN only (ebpf/src/rss_emu_tests.rs; `install` does not
 * load it): returns the hash flowlane_rss computes for a frame under the
 * configuration in force, 0 for a frame it does not hash. Sends nothing,
 * counts nothing. */
SEC("tc")
int flowlane_rss_hash(struct __sk_buff *skb)
{
	struct rss_cfg *cfg = active_cfg();
	__u32 hash = 0;

	if (!cfg || rss_hash(skb, cfg, &hash))
		return 0;
	return hash;
}
