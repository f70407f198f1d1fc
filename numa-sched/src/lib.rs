//! flowlane's placement policy: snapshots in, plans out, no side effects.
#![forbid(unsafe_code)]
