/* SPDX-License-Identifier: (MIT OR Apache-2.0) */
/* Shared constants between flowlane's BPF programs and their Rust loaders
 * (ebpf/src/*.rs mirror these; a test checks the skeletons' map sizes). */
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
