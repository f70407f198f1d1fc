/* SPDX-License-Identifier: (MIT OR Apache-2.0) */
/* Shared constants between flowlane's BPF programs and their Rust loaders
 * (ebpf/src/lib.rs's `limits` mirrors these; skeleton_maps_match_the_loaders
 * in ebpf/src/rss_emu_tests.rs checks the skeletons' map sizes and value
 * layouts against them and the loaders' encodings). */
#ifndef FLOWLANE_COMMON_H
#define FLOWLANE_COMMON_H

/* Largest number of receive queues flowlane steers. */
#define FL_MAX_QUEUES 256
/* Largest RSS indirection table the emulated NIC supports. */
#define FL_MAX_TABLE 2048
/* Longest Toeplitz key the emulated NIC accepts (ice uses 52 bytes). */
#define FL_MAX_KEY 52
/* Longest Toeplitz input: IPv6 src + dst + ports. */
#define FL_MAX_HASH_INPUT 36

#endif
