//! Standard output that a closed pipe cannot crash: `flowlane ... | head`
//! must not panic (Rust ignores SIGPIPE, so `println!` on a closed pipe
//! panics) nor exit early, because a service that lost its reader still
//! has to release what it holds (XDP programs, tc hooks, namespaces).
//! Writes that fail are dropped; the command goes on and exits as usual.

/// `print!` whose failure (a closed pipe) is ignored.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

/// `println!` whose failure (a closed pipe) is ignored.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
