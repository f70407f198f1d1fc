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

struct rss_cfg {
	__u32 enabled;     /* 0: leave queue selection to the kernel */
	__u32 key_len;     /* bytes of key in use */
	__u32 table_size;  /* power of two, <= FL_MAX_TABLE */
	__u32 hash_fields; /* FL_HASH_* */
	__u8 key[FL_MAX_KEY];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rss_cfg);
} rss_cfg SEC(".maps");

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

SEC("tc")
int flowlane_rss(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct rss_cfg *cfg = bpf_map_lookup_elem(&rss_cfg, &zero);
	struct hash_input in = {};
	__u32 l4_off = 0;
	int ports = 0;
	__u16 eth_proto;

	if (skb->mark == FL_RSS_MARK) {
		/* Our clone, steered already. */
		skb->mark = 0;
		return TC_ACT_OK;
	}
	if (!cfg || !cfg->enabled || cfg->table_size == 0)
		return TC_ACT_OK;
	if (load(skb, 12, &eth_proto, 2))
		return TC_ACT_OK;

	if (eth_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (load(skb, ETH_HLEN, &ip, sizeof(ip)))
			return TC_ACT_OK;
		__builtin_memcpy(in.bytes, &ip.saddr, 4);
		__builtin_memcpy(in.bytes + 4, &ip.daddr, 4);
		in.len = 8;
		if (!(ip.frag_off & bpf_htons(0x3fff))) {
			if (ip.protocol == IPPROTO_TCP)
				ports = cfg->hash_fields & FL_HASH_TCP4_PORTS;
			else if (ip.protocol == IPPROTO_UDP)
				ports = cfg->hash_fields & FL_HASH_UDP4_PORTS;
		}
		l4_off = ETH_HLEN + ip.ihl * 4;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (load(skb, ETH_HLEN, &ip6, sizeof(ip6)))
			return TC_ACT_OK;
		__builtin_memcpy(in.bytes, &ip6.saddr, 16);
		__builtin_memcpy(in.bytes + 16, &ip6.daddr, 16);
		in.len = 32;
		if (ip6.nexthdr == IPPROTO_TCP)
			ports = cfg->hash_fields & FL_HASH_TCP6_PORTS;
		else if (ip6.nexthdr == IPPROTO_UDP)
			ports = cfg->hash_fields & FL_HASH_UDP6_PORTS;
		l4_off = ETH_HLEN + sizeof(ip6);
	} else {
		/* Non-IP traffic (ARP) is not hashed: queue 0, as on hardware. */
		skb->queue_mapping = 1;
		return send_steered(skb);
	}

	if (ports) {
		__u8 p[4];

		if (load(skb, l4_off, p, 4))
			return TC_ACT_OK;
		if (in.len == 8)
			__builtin_memcpy(in.bytes + 8, p, 4);
		else
			__builtin_memcpy(in.bytes + 32, p, 4);
		in.len += 4;
	}

	{
		__u32 hash = toeplitz(cfg, &in);
		__u32 bucket = hash & (cfg->table_size - 1) & (FL_MAX_TABLE - 1);
		__u32 *queue = bpf_map_lookup_elem(&rss_table, &bucket);
		__u64 *n;
		__u32 q;

		if (!queue)
			return TC_ACT_OK;
		q = *queue % FL_MAX_QUEUES;
		skb->queue_mapping = q + 1;
		bpf_set_hash(skb, hash);
		n = bpf_map_lookup_elem(&rss_queue_packets, &q);
		if (n)
			*n += 1;
	}
	return send_steered(skb);
}
