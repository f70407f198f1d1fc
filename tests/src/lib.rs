//! Shared helpers for flowlane's integration tests.
