//! flowlane's data path.
