// SPDX-License-Identifier: (MIT OR Apache-2.0)
/*
 * Link impairment for the test bed, where the kernel has no sch_netem:
 * random loss, duplication, corruption, reordering and ECN CE marking of IP
 * packets, at tc
 * egress (kernel -> flowlane) and tc ingress (flowlane -> kernel: AF_XDP
 * copy-mode TX bypasses qdiscs and tc on the sending side) of the peer veth.
 *
 * - loss: the packet is freed. At ingress that is TC_ACT_SHOT; at egress it
 *   is TC_ACT_STOLEN, because the kernel reports an egress TC_ACT_SHOT to
 *   the sending socket as a local drop (NET_XMIT_DROP: TCP's
 *   tcp_transmit_skb fails and the segment is simply sent again, never lost
 *   on the wire), whereas TC_ACT_STOLEN reads as sent (NET_XMIT_SUCCESS),
 *   as netem's loss does;
 * - duplicate: bpf_clone_redirect back into the same hook; the clone carries
 *   FL_IMPAIR_MARK so it is not impaired again;
 * - corrupt: one random bit flipped in a random byte after the IP header
 *   (checksums are not fixed, so the receiver's verification must catch it);
 * - reorder: the packet takes a slow path — an HTB class of limited rate
 *   (classid in the config) on the device (egress) or on an ifb device
 *   (ingress) — and so arrives after packets sent later on the fast path;
 * - ce: an ECN-capable packet (ECT(0) or ECT(1)) is marked CE (0b11), as an
 *   RFC 3168 §5 router does instead of dropping; Not-ECT packets never are.
 *   The IPv4 header checksum is fixed; TCP's does not cover the field.
 *
 * Rates are parts per million. Packets other than IPv4/IPv6 (ARP) pass.
 * Returns TC_ACT_UNSPEC so that later filters (the RSS emulator) still run.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define FL_IMPAIR_MARK 0x464c0000u /* "FL" in the high half of skb->mark */

/* Keep in sync with ebpf/src/impair.rs. */
struct impair_cfg {
	__u32 loss_ppm;
	__u32 duplicate_ppm;
	__u32 corrupt_ppm;
	__u32 reorder_ppm;
	__u32 reorder_classid;  /* HTB class of the slow path */
	__u32 reorder_ifindex;  /* ingress only: ifb device of the slow path */
	__u32 ce_ppm;           /* ECT packets marked CE */
};

enum { DIR_EGRESS = 0, DIR_INGRESS = 1, DIRS = 2 };
enum { ST_SEEN, ST_LOST, ST_DUPLICATED, ST_CORRUPTED, ST_REORDERED, ST_CE_MARKED, ST_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIRS);
	__type(key, __u32);
	__type(value, struct impair_cfg);
} impair_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DIRS * ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} impair_stats SEC(".maps");

static __always_inline void count(__u32 dir, __u32 st)
{
	__u32 idx = dir * ST_MAX + st;
	__u64 *v = bpf_map_lookup_elem(&impair_stats, &idx);

	if (v)
		*v += 1;
}

static __always_inline int chance(__u32 ppm)
{
	return ppm && bpf_get_prandom_u32() % 1000000 < ppm;
}

static __always_inline __u32 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	return (sum & 0xffff) + (sum >> 16);
}

/*
 * Flips one random bit in a random byte after the IP header.
 *
 * A locally generated skb at tc egress is usually CHECKSUM_PARTIAL: its
 * TCP/UDP checksum field holds only the pseudo-header sum, and the kernel
 * completes it after this hook (skb_checksum_help) — over the corrupted
 * bytes, which would hide the corruption. netem completes the checksum
 * before corrupting; BPF cannot, so when the field equals the pseudo-header
 * sum (TCP over IPv4 or IPv6), the flip is compensated in that field so that the completed
 * checksum is the one of the original bytes, as a corrupting wire would
 * deliver it. The test bed caps gso_max_segs at 1 while impairing, so the
 * skb here is one wire packet. Sums are over 16-bit words as loaded from the packet, which
 * ones'-complement arithmetic allows whatever the byte order.
 */
static __always_inline int corrupt(struct __sk_buff *skb, __u32 l3, __u32 dir)
{
	__u32 off = l3 + bpf_get_prandom_u32() % (skb->len - l3);
	__u8 old, new;

	if (bpf_skb_load_bytes(skb, off, &old, 1))
		return -1;
	new = old ^ (__u8)(1u << (bpf_get_prandom_u32() % 8));
	if (bpf_skb_store_bytes(skb, off, &new, 1, 0))
		return -1;

	/* Only the kernel's TCP at the peer's egress hands tc a
	 * CHECKSUM_PARTIAL skb (tcp_v4_send_check and tcp_v6_send_check
	 * always do; UDP completes its checksum in software on a device
	 * without TX checksumming, and frames arriving at ingress are
	 * complete). Deciding by the field's value alone would, once in 65536
	 * complete checksums, "compensate" one and hide the flip. */
	if (dir != DIR_EGRESS)
		return 0;
	{
		__u32 l4, csum_off, sum;
		__u16 field, l4_len;

		if (skb->protocol == bpf_htons(ETH_P_IP)) {
			struct iphdr ip;

			if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
				return 0;
			if (ip.protocol != IPPROTO_TCP)
				return 0;
			l4 = ETH_HLEN + ip.ihl * 4;
			l4_len = bpf_ntohs(ip.tot_len) - ip.ihl * 4;
			sum = (ip.saddr & 0xffff) + (ip.saddr >> 16) + (ip.daddr & 0xffff) +
			      (ip.daddr >> 16);
		} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
			struct ipv6hdr ip6;
			int i;

			if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)))
				return 0;
			/* Extension headers: not corrupted in step with a checksum. */
			if (ip6.nexthdr != IPPROTO_TCP)
				return 0;
			l4 = ETH_HLEN + sizeof(ip6);
			l4_len = bpf_ntohs(ip6.payload_len);
			sum = 0;
#pragma unroll
			for (i = 0; i < 8; i++)
				sum += ip6.saddr.in6_u.u6_addr16[i] + ip6.daddr.in6_u.u6_addr16[i];
		} else {
			return 0;
		}
		/* The pseudo-header's protocol and length words (RFC 9293 §3.1:
		 * IPv4; RFC 8200 §8.1: IPv6, the same sum for a length under
		 * 65536). */
		sum += bpf_htons((__u16)IPPROTO_TCP) + bpf_htons(l4_len);
		csum_off = l4 + 16;
		if (off < l4 || off == csum_off || off == csum_off + 1)
			return 0;
		if (bpf_skb_load_bytes(skb, csum_off, &field, 2))
			return 0;
		if (field != (__u16)fold(sum))
			return 0; /* not the pseudo-header sum: already complete */
		{
			/* The byte's place in its 16-bit word, as loaded. */
			__u32 shift = ((off - l4) & 1) ? 8 : 0;
			__u32 w_old = (__u32)old << shift, w_new = (__u32)new << shift;
			__u16 fixed = (__u16)fold((__u32)field + w_old + (~w_new & 0xffff));

			bpf_skb_store_bytes(skb, csum_off, &fixed, 2, 0);
		}
	}
	return 0;
}

/*
 * Marks an ECT(0)/ECT(1) packet CE (RFC 3168 §5): the two low bits of the
 * IPv4 TOS octet (header checksum fixed, RFC 1624 style, by
 * bpf_l3_csum_replace over the first 16-bit word) or of the IPv6 traffic
 * class (bits 4-5 of the header's second byte; IPv6 has no header
 * checksum). Returns 1 if the packet was marked, 0 if it is Not-ECT or
 * already CE.
 */
static __always_inline int mark_ce(struct __sk_buff *skb)
{
	__u8 w[2];
	__u16 old, new;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, w, 2))
		return 0;
	__builtin_memcpy(&old, w, 2);
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 ecn = w[1] & 0x03;

		if (ecn == 0 || ecn == 0x03)
			return 0;
		w[1] |= 0x03;
		__builtin_memcpy(&new, w, 2);
		if (bpf_skb_store_bytes(skb, ETH_HLEN, w, 2, 0))
			return 0;
		bpf_l3_csum_replace(skb, ETH_HLEN + 10, old, new, sizeof(__u16));
		return 1;
	}
	{
		__u8 ecn = (w[1] >> 4) & 0x03;

		if (ecn == 0 || ecn == 0x03)
			return 0;
		w[1] |= 0x30;
		if (bpf_skb_store_bytes(skb, ETH_HLEN, w, 2, 0))
			return 0;
		return 1;
	}
}

static __always_inline int impair(struct __sk_buff *skb, __u32 dir)
{
	struct impair_cfg *cfg = bpf_map_lookup_elem(&impair_cfg, &dir);
	__u32 l3 = ETH_HLEN;

	if (!cfg)
		return TC_ACT_UNSPEC;
	if ((skb->mark & 0xffff0000u) == FL_IMPAIR_MARK)
		return TC_ACT_UNSPEC;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		l3 += 20;
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		l3 += 40;
	else
		return TC_ACT_UNSPEC;
	count(dir, ST_SEEN);

	if (chance(cfg->loss_ppm)) {
		count(dir, ST_LOST);
		/* See the head comment: SHOT at egress is no loss to the sender. */
		return dir == DIR_EGRESS ? TC_ACT_STOLEN : TC_ACT_SHOT;
	}
	/* Drawn for every packet (Not-ECT ones included), so that the rate
	 * is per packet whatever the mix. */
	if (chance(cfg->ce_ppm) && mark_ce(skb))
		count(dir, ST_CE_MARKED);
	if (chance(cfg->duplicate_ppm)) {
		__u32 mark = skb->mark;

		skb->mark = FL_IMPAIR_MARK;
		if (bpf_clone_redirect(skb, skb->ifindex, dir == DIR_INGRESS ? BPF_F_INGRESS : 0) == 0)
			count(dir, ST_DUPLICATED);
		skb->mark = mark;
	}
	if (chance(cfg->corrupt_ppm) && skb->len > l3 && corrupt(skb, l3, dir) == 0)
		count(dir, ST_CORRUPTED);
	if (chance(cfg->reorder_ppm) && cfg->reorder_classid) {
		count(dir, ST_REORDERED);
		skb->priority = cfg->reorder_classid;
		if (dir == DIR_INGRESS && cfg->reorder_ifindex) {
			skb->mark = FL_IMPAIR_MARK;
			return bpf_redirect(cfg->reorder_ifindex, 0);
		}
	}
	return TC_ACT_UNSPEC;
}

SEC("tc")
int flowlane_impair_egress(struct __sk_buff *skb)
{
	return impair(skb, DIR_EGRESS);
}

SEC("tc")
int flowlane_impair_ingress(struct __sk_buff *skb)
{
	return impair(skb, DIR_INGRESS);
}
