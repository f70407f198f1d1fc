//! Software prefetch: the CPU is asked to bring a cache line in while it
//! works on something else. The worker uses it one frame ahead: the next
//! frame's connection state ([`flowlane_tcp::Stack::expect`]) is on its
//! way while the current frame is processed, so that with thousands of
//! connections their misses overlap instead of stalling one by one.
// One intrinsic, which Rust marks unsafe for its target feature alone.
#![allow(unsafe_code)]

use flowlane_tcp::StateHint;

/// Prefetches every line of `hint` into all cache levels (a hint to the
/// CPU: nothing is read, and an address it cannot reach is ignored).
#[inline]
pub(crate) fn state(hint: StateHint) {
    for line in hint.lines() {
        line_at(line);
    }
}

/// Prefetches the cache line holding `p`, as [`state`] does.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn line_at(p: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: PREFETCHT0 reads no memory the program can observe and
    // never faults, whatever the address (Intel SDM vol. 2B, PREFETCHh:
    // "a hint", no exception on an invalid address); it needs SSE, which
    // every x86_64 CPU has (the reason the intrinsic is `unsafe` at all).
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
}

/// Elsewhere no prefetch (the data path is tuned on x86_64).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn line_at(_p: *const u8) {}
