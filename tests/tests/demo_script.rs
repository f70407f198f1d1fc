//! `scripts/demo.sh` as a newcomer meets it, and `scripts/setup.sh` without
//! root: the script itself runs, in a copy of the repository's layout whose
//! setup, cargo, `flowlane` and `flowlane-ttcp` are fakes that write down
//! that they ran (and `id` one that says "not root" where a test needs it),
//! so that no test bed, build or privilege is needed.
//!
//! - its own flags are checked before anything runs: `--help` prints its
//!   usage (exit 0), an unknown flag one line and the usage (exit 2), and
//!   neither runs setup or the build nor makes a folder;
//! - not root: one line saying why root is needed, exit 1, nothing made;
//! - a part ended by a signal (`flowlane demo` exits 130 on Ctrl-C), or any
//!   part after a Ctrl-C reached the script too (flowlane-ttcp exits 1
//!   then), ends the demo at once with status 130; a flag value `flowlane
//!   demo` refuses (exit 2) ends it too; a failed UDP part still lets the
//!   TCP part run;
//! - the closing listing names every file kept, the `*.svg` plots included;
//! - setup.sh with neither root nor sudo says what to do, in one line.

use std::path::PathBuf;
use std::process::{Command, Output};

use flowlane_tests::script_repo::{fake_program as script, scripts_dir, ScriptRepo};
use flowlane_tests::{text, OpenDir};

/// demo.sh's layout ([`ScriptRepo`]) with fake parts that append a line
/// to the log when they run.
struct FakeRepo {
    repo: ScriptRepo,
}

impl std::ops::Deref for FakeRepo {
    type Target = ScriptRepo;
    fn deref(&self) -> &ScriptRepo {
        &self.repo
    }
}

impl FakeRepo {
    fn new(tag: &str) -> FakeRepo {
        let repo = ScriptRepo::new(tag, "demo.sh");
        let root = repo.dir.path("repo");
        script(
            &root.join("scripts/setup.sh"),
            "echo setup >>\"$FAKE_LOG\"\n",
        );
        repo.fake_on_path("cargo", &ScriptRepo::logging("cargo"));
        // `flowlane demo --out DIR ...`: keeps a result, exits as told.
        script(
            &root.join("target/release/flowlane"),
            "echo \"flowlane $*\" >>\"$FAKE_LOG\"\n\
             [ \"$1 $2\" = \"demo --out\" ] && echo '{}' >\"$3/udp-rss.json\"\n\
             exit \"${FAKE_DEMO_STATUS:-0}\"\n",
        );
        // `flowlane-ttcp matrix ... --out DIR`: keeps its files, plots in
        // both formats, exits as told; or, as when Ctrl-C reached it and
        // the script, exits 1 after a SIGINT to the script.
        script(
            &root.join("target/release/flowlane-ttcp"),
            "echo \"flowlane-ttcp $*\" >>\"$FAKE_LOG\"\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n\
             mkdir -p \"$out\"\n\
             for f in results.json table.md throughput.png throughput.svg; do \
             echo x >\"$out/$f\"; done\n\
             [ -n \"$FAKE_TTCP_CTRL_C\" ] && kill -INT $PPID && exit 1\n\
             exit \"${FAKE_TTCP_STATUS:-0}\"\n",
        );
        FakeRepo { repo }
    }

    /// What the run left in the folder it ran from.
    fn made(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path("cwd"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    /// The folder a run with `--out out` keeps its results in.
    fn out(&self) -> PathBuf {
        self.dir.path("cwd/out")
    }
}

/// Lines of stderr.
fn err_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn help_prints_the_usage_and_runs_nothing() {
    let repo = FakeRepo::new("demo-help");
    for flag in ["--help", "-h"] {
        let o = repo.run(&[flag], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.starts_with("usage: scripts/demo.sh [--out DIR]"),
            "{}",
            text(&o)
        );
        assert!(out.contains("--flows"), "{}", text(&o));
        assert_eq!(repo.log(), "", "nothing ran: {}", text(&o));
        assert!(repo.made().is_empty(), "no folder: {:?}", repo.made());
    }
}

#[test]
fn an_unknown_flag_is_one_line_and_the_usage_before_anything_runs() {
    let repo = FakeRepo::new("demo-bogus");
    for args in [&["--bogus"][..], &["--flows", "8", "extra"], &["--out"]] {
        let o = repo.run(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let lines = err_lines(&o);
        assert!(lines[0].starts_with("demo: "), "{args:?}: {}", text(&o));
        assert!(
            lines[0].contains(args[args.len() - 1]),
            "names the flag: {}",
            text(&o)
        );
        assert_eq!(repo.log(), "", "{args:?}: nothing ran: {}", text(&o));
        assert!(
            repo.made().is_empty(),
            "{args:?}: no folder: {:?}",
            repo.made()
        );
    }
    let o = repo.run(&["--bogus"], &[]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("\nusage: scripts/demo.sh"),
        "{}",
        text(&o)
    );
}

#[test]
fn not_root_is_one_line_saying_why_before_anything_is_made() {
    let repo = FakeRepo::new("demo-nonroot");
    script(&repo.dir.path("bin/id"), "echo 1000\n");
    let o = repo.run(&["--out", "out"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let lines = err_lines(&o);
    assert_eq!(lines.len(), 1, "{}", text(&o));
    for word in ["needs root", "namespaces", "BPF", "AF_XDP"] {
        assert!(lines[0].contains(word), "{word}: {}", text(&o));
    }
    assert_eq!(repo.log(), "", "nothing ran: {}", text(&o));
    assert!(repo.made().is_empty(), "no folder: {:?}", repo.made());
}

#[test]
fn an_interrupted_part_ends_the_demo_at_once_with_its_status() {
    for (env, ran_tcp) in [
        ("FAKE_DEMO_STATUS", false),
        ("FAKE_TTCP_STATUS", true),
        ("FAKE_TTCP_CTRL_C", true),
    ] {
        let repo = FakeRepo::new("demo-int");
        let o = repo.run(&["--out", "out"], &[(env, "130")]);
        assert_eq!(o.status.code(), Some(130), "{env}: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.contains("== [4/4]"), ran_tcp, "{env}: {}", text(&o));
        assert_eq!(repo.ran("flowlane-ttcp"), ran_tcp, "{env}: {}", repo.log());
        let lines = err_lines(&o);
        assert_eq!(lines.len(), 1, "{env}: one line: {}", text(&o));
        assert!(lines[0].contains("interrupted"), "{env}: {}", text(&o));
        assert!(!out.contains("results kept"), "{env}: {}", text(&o));
    }
}

#[test]
fn a_flag_value_flowlane_demo_refuses_stops_the_demo() {
    let repo = FakeRepo::new("demo-usage");
    let o = repo.run(
        &["--out", "out", "--flows", "0"],
        &[("FAKE_DEMO_STATUS", "2")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(repo.log().contains("flowlane demo --out"), "{}", repo.log());
    assert!(repo.log().contains("--flows 0"), "{}", repo.log());
    assert!(!repo.ran("flowlane-ttcp"), "{}", repo.log());
}

#[test]
fn a_failed_udp_part_still_runs_the_tcp_part_and_fails_the_demo() {
    let repo = FakeRepo::new("demo-udpfail");
    let o = repo.run(&["--out", "out"], &[("FAKE_DEMO_STATUS", "1")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(repo.ran("flowlane-ttcp"), "{}", repo.log());
}

#[test]
fn the_closing_listing_names_every_file_kept() {
    let repo = FakeRepo::new("demo-list");
    let o = repo.run(&["--out", "out"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        repo.log().lines().next(),
        Some("setup"),
        "setup first: {}",
        repo.log()
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let listing: Vec<&str> = out
        .split(&format!(
            "demo: results kept in {}/\n",
            repo.out().display()
        ))
        .nth(1)
        .unwrap_or_else(|| panic!("no listing: {}", text(&o)))
        .lines()
        .collect();
    assert_eq!(
        listing,
        [
            "  tcp/results.json",
            "  tcp/table.md",
            "  tcp/throughput.png",
            "  tcp/throughput.svg",
            "  udp-rss.json",
        ],
        "{}",
        text(&o)
    );
}

/// A target directory shared between checkouts (`CARGO_TARGET_DIR`, given
/// relative to where the user runs the demo): the binaries run are the ones
/// cargo built there, not the repository's `target/` (which has none).
#[test]
fn the_binaries_run_from_cargo_s_target_directory() {
    let repo = FakeRepo::new("demo-target");
    std::fs::rename(repo.dir.path("repo/target"), repo.dir.path("cwd/shared")).unwrap();
    let o = repo.run(&["--out", "out"], &[("CARGO_TARGET_DIR", "shared")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(repo.ran("flowlane"), "{}", repo.log());
    let shared = repo.dir.path("cwd/shared/release/flowlane");
    assert!(
        repo.log()
            .contains(&format!("--flowlane {}", shared.display())),
        "the matrix is given the shared build's flowlane: {}",
        repo.log()
    );
}

#[test]
fn setup_without_root_or_sudo_says_what_to_do() {
    let dir = OpenDir::new("setup-nosudo");
    // A PATH of `id` alone (saying "not root"): no sudo on it.
    script(&dir.path("bin/id"), "echo 1000\n");
    let o = Command::new("/bin/bash")
        .arg("-c")
        .arg(". \"$1\"; as_root apt-get update; echo continued")
        .arg("bash")
        .arg(scripts_dir().join("setup.sh"))
        .env("PATH", dir.path("bin"))
        .output()
        .expect("bash");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("continued"));
    let lines = err_lines(&o);
    assert_eq!(lines.len(), 1, "{}", text(&o));
    assert!(
        lines[0].contains("needs root")
            && lines[0].contains("no sudo")
            && lines[0].contains("as root"),
        "{}",
        text(&o)
    );
}
