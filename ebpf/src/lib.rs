//! flowlane's BPF programs and typed access to their maps.
