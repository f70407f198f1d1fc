//! flowlane's sans-IO TCP/IP stack: segments and time go in, segments and
//! application events come out. No threads, no syscalls, no clock reads.
#![forbid(unsafe_code)]
