//! What libbpf says while the steering program is loaded and attached,
//! kept instead of printed: libbpf writes its warnings to stderr itself
//! (`libbpf: prog 'flowlane_steer': failed to attach to xdp: ...`), a line
//! before flowlane's own, which already says what failed and what to do;
//! where flowlane's line has nothing better, it carries libbpf's last
//! words instead (so no cause is lost).

use std::sync::Mutex;

use libbpf_rs::{PrintCallback, PrintLevel};

/// libbpf's warnings since the [`Listening`] in force began (at most
/// [`KEPT`]).
static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Warnings kept at most: a failure says a few lines.
const KEPT: usize = 16;

/// libbpf's warnings go to [`SAID`] while this lives; the callback that
/// was in force (libbpf-rs's printing one) is put back when it drops.
pub(crate) struct Listening {
    previous: Option<(PrintLevel, PrintCallback)>,
}

impl Listening {
    /// Starts keeping libbpf's warnings (and dropping its info and debug
    /// lines, which it prints only when asked for them).
    pub(crate) fn start() -> Listening {
        SAID.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let previous = libbpf_rs::set_print(Some((PrintLevel::Warn, keep)));
        Listening { previous }
    }

    /// libbpf's last warning, if it said one, without its `libbpf: `
    /// prefix or line end.
    pub(crate) fn last(&self) -> Option<String> {
        SAID.lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        libbpf_rs::set_print(self.previous.take());
    }
}

fn keep(_: PrintLevel, msg: String) {
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.len() < KEPT {
        let line = msg.trim();
        said.push(line.strip_prefix("libbpf: ").unwrap_or(line).to_string());
    }
}
