//! The scripts of `scripts/` take the paths a user gives them (a binary in
//! `FLOWLANE`, a folder in `OUT`, `--out DIR`) from the folder the script
//! was started in, as any program takes a relative path, though they move
//! to the repository to build: `FLOWLANE=target/release/flowlane
//! scripts/x.sh` runs that binary. One helper, `scripts/lib/caller-paths.sh`,
//! makes them absolute before the move; the scripts are run here with fakes
//! ([`ScriptRepo`]) up to their first use of the binary.

use flowlane_tests::script_repo::{fake_program, ScriptRepo};
use flowlane_tests::text;

/// `script` sourcing the helper from `cwd/`, with `env`: what it prints.
fn helper(repo: &ScriptRepo, script: &str, env: &[(&str, &str)]) -> String {
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -eu; source \"$1\"; {script}"))
        .arg("bash")
        .arg(repo.dir.path("repo/scripts/lib/caller-paths.sh"))
        .current_dir(repo.dir.path("cwd"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_helper_takes_paths_from_the_callers_folder() {
    let repo = ScriptRepo::new("cpath-helper", "conformance.sh");
    let cwd = repo.dir.path("cwd");
    let show = "echo \"${A:-unset}|${B:-unset}|${C:-unset}\"";
    // Paths: relative ones from cwd/ (there or not), absolute ones as they
    // are, unset or empty ones left so.
    assert_eq!(
        helper(
            &repo,
            &format!("caller_paths A B C; {show}"),
            &[("A", "out/x"), ("B", "/srv/out"), ("C", "")]
        ),
        format!("{}/out/x|/srv/out|unset\n", cwd.display())
    );
    assert_eq!(
        helper(&repo, &format!("caller_paths A; {show}"), &[("A", "../up")]),
        format!("{}|unset|unset\n", repo.dir.path("up").display())
    );
    // Programs: a path (a `/` in it) from cwd/, a bare name left to PATH.
    assert_eq!(
        helper(
            &repo,
            &format!("caller_programs A B C; {show}"),
            &[
                ("A", "target/release/flowlane"),
                ("B", "python3"),
                ("C", "./flowlane")
            ]
        ),
        format!(
            "{0}/target/release/flowlane|python3|{0}/flowlane\n",
            cwd.display()
        )
    );
}

/// A fake `flowlane` at `cwd/rel/flowlane` that writes down that it ran
/// and fails (the script stops at its first use of it: `testbed up`).
fn relative_flowlane(repo: &ScriptRepo) {
    fake_program(
        &repo.dir.path("cwd/rel/flowlane"),
        "echo \"flowlane $*\" >>\"$FAKE_LOG\"\nexit 1\n",
    );
}

/// Each script that takes `FLOWLANE` runs the one the user named by a path
/// relative to where they started it (before: `no rel/flowlane`, or
/// `testbed up` run as `rel/flowlane` in the repository, not found).
#[test]
fn a_relative_flowlane_is_the_callers() {
    for (script, fakes) in [
        ("conformance.sh", &["python3"][..]),
        ("exec-models.sh", &[]),
        ("idle-conns.sh", &[]),
        ("hostile-peer.sh", &[]),
        ("conn-rate.sh", &["wrk", "nginx"]),
    ] {
        let repo = ScriptRepo::new(&format!("cpath-{script}"), script);
        repo.fake_on_path("id", "echo 0\n");
        for f in fakes {
            repo.fake_on_path(f, "exit 0\n");
        }
        relative_flowlane(&repo);
        let o = repo.run(&[], &[("FLOWLANE", "rel/flowlane")]);
        assert!(!o.status.success(), "{script}: {}", text(&o));
        assert!(
            repo.log()
                .lines()
                .any(|l| l.starts_with("flowlane testbed up --bed")),
            "{script}: the relative FLOWLANE did not run: {}\nlog: {}",
            text(&o),
            repo.log()
        );
    }
}

/// `OUT=keep` is a folder under where the script was started, not under
/// the repository (hostile-peer.sh makes it before its first run).
#[test]
fn a_relative_out_is_the_callers() {
    let repo = ScriptRepo::new("cpath-out", "hostile-peer.sh");
    repo.fake_on_path("id", "echo 0\n");
    relative_flowlane(&repo);
    let o = repo.run(&[], &[("FLOWLANE", "rel/flowlane"), ("OUT", "keep")]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(repo.dir.path("cwd/keep").is_dir(), "{}", text(&o));
    assert!(!repo.dir.path("repo/keep").exists(), "{}", text(&o));
}

/// ttcp-matrix.sh runs the matrix from where it was started, so that
/// `--out DIR` (and the default `results/<date>/`) is the user's folder.
#[test]
fn ttcp_matrix_sh_writes_where_it_was_started() {
    let repo = ScriptRepo::new("cpath-matrix", "ttcp-matrix.sh");
    repo.fake_on_path("cargo", &ScriptRepo::logging("cargo"));
    fake_program(
        &repo.dir.path("cwd/shared/release/flowlane-ttcp"),
        "echo \"flowlane-ttcp in $PWD: $*\" >>\"$FAKE_LOG\"\n",
    );
    let o = repo.run(
        &["--quick", "--out", "mine"],
        &[("CARGO_TARGET_DIR", "shared")],
    );
    assert!(o.status.success(), "{}", text(&o));
    let cwd = repo.dir.path("cwd");
    assert!(
        repo.log().contains(&format!(
            "flowlane-ttcp in {}: matrix --flowlane {}/shared/release/flowlane --quick --out mine",
            cwd.display(),
            cwd.display()
        )),
        "{}",
        repo.log()
    );
    // cargo built the repository's workspace, from wherever it ran.
    assert!(
        repo.log()
            .contains("cargo build --release -q --manifest-path"),
        "{}",
        repo.log()
    );
}
