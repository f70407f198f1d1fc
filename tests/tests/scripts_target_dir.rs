//! The scripts of `scripts/` run the binaries cargo built: under
//! `$CARGO_TARGET_DIR` when set (a target directory shared between
//! checkouts; a relative one is taken from where the user started the
//! script, as cargo takes it), else the repository's `target/`. They find
//! that folder through one helper, `scripts/lib/target-dir.sh`; the scripts
//! whose first steps need no root, bed or build are run here with fakes
//! ([`ScriptRepo`]).

use flowlane_tests::script_repo::{fake_program, scripts_dir, ScriptRepo};
use flowlane_tests::text;

/// The folder the helper names, sourced from `cwd/` with `env`.
fn target_dir_from(repo: &ScriptRepo, env: &[(&str, &str)]) -> String {
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg("set -eu; source \"$1\"; echo \"$target_dir\"; echo \"${CARGO_TARGET_DIR:-}\"")
        .arg("bash")
        .arg(repo.dir.path("repo/scripts/lib/target-dir.sh"))
        .current_dir(repo.dir.path("cwd"))
        .env_remove("CARGO_TARGET_DIR")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_helper_names_cargo_s_target_directory() {
    let repo = ScriptRepo::new("tdir-helper", "ttcp-matrix.sh");
    let cwd = repo.dir.path("cwd");
    let own = repo.dir.path("repo/target");
    // Unset: the repository's target/, and CARGO_TARGET_DIR stays unset.
    assert_eq!(
        target_dir_from(&repo, &[]),
        format!("{}\n\n", own.display())
    );
    // Relative: from where the script was started, exported as such for
    // the script's own cargo calls.
    let shared = cwd.join("shared");
    assert_eq!(
        target_dir_from(&repo, &[("CARGO_TARGET_DIR", "shared")]),
        format!("{0}\n{0}\n", shared.display())
    );
    assert_eq!(
        target_dir_from(&repo, &[("CARGO_TARGET_DIR", "/srv/t")]),
        "/srv/t\n/srv/t\n"
    );
}

/// A fake binary under `cwd/shared/release/` that writes down its name,
/// where it ran from and its arguments.
fn shared_binary(repo: &ScriptRepo, name: &str) {
    fake_program(
        &repo.dir.path("cwd/shared/release").join(name),
        &format!("echo \"{name} $0 $*\" >>\"$FAKE_LOG\"\n"),
    );
}

#[test]
fn ttcp_matrix_sh_runs_the_binaries_of_cargo_s_target_directory() {
    let repo = ScriptRepo::new("tdir-matrix", "ttcp-matrix.sh");
    repo.fake_on_path("cargo", &ScriptRepo::logging("cargo"));
    shared_binary(&repo, "flowlane-ttcp");
    let o = repo.run(&["--quick"], &[("CARGO_TARGET_DIR", "shared")]);
    assert!(o.status.success(), "{}", text(&o));
    let bin = repo.dir.path("cwd/shared/release");
    assert!(
        repo.log().contains(&format!(
            "flowlane-ttcp {}/flowlane-ttcp matrix --flowlane {}/flowlane --quick",
            bin.display(),
            bin.display()
        )),
        "{}",
        repo.log()
    );
}

#[test]
fn device_kit_sh_packs_the_binaries_of_cargo_s_target_directory() {
    let repo = ScriptRepo::new("tdir-kit", "device-kit.sh");
    // cargo builds nothing and reports no test binary: the kit stops
    // there, after packing the two binaries.
    repo.fake_on_path("cargo", &ScriptRepo::logging("cargo"));
    repo.fake_on_path("strip", "");
    shared_binary(&repo, "flowlane");
    shared_binary(&repo, "flowlane-ttcp");
    let o = repo.run(&[], &[("CARGO_TARGET_DIR", "shared")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("cargo built no flowlane_dataplane test binary"),
        "{}",
        text(&o)
    );
    for b in ["flowlane", "flowlane-ttcp"] {
        let packed = repo.dir.path("repo/target/device-kit/bin").join(b);
        let packed = std::fs::read_to_string(&packed).unwrap_or_default();
        assert!(
            packed.contains(&format!("echo \"{b} ")),
            "{b}: {}",
            text(&o)
        );
    }
}

#[test]
fn conformance_sh_looks_for_flowlane_in_cargo_s_target_directory() {
    let repo = ScriptRepo::new("tdir-conf", "conformance.sh");
    repo.fake_on_path("id", "echo 0\n");
    repo.fake_on_path("python3", "exit 0\n");
    let o = repo.run(&[], &[("CARGO_TARGET_DIR", "shared")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let want = format!(
        "conformance: no {}: cargo build --release -p flowlane-control, or set FLOWLANE",
        repo.dir.path("cwd/shared/release/flowlane").display()
    );
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim(), want);
}

/// No script names the repository's `target/release` itself: each
/// sources the helper and runs `$target_dir/release/...`.
#[test]
fn every_script_finds_the_build_through_the_helper() {
    let mut offenders = Vec::new();
    for e in std::fs::read_dir(scripts_dir()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".sh") {
            continue;
        }
        let body = std::fs::read_to_string(&path).unwrap();
        let code: Vec<&str> = body
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        let names_release = code.iter().any(|l| l.contains("release/"));
        let sources = code
            .iter()
            .any(|l| l.contains("source \"$(dirname \"$0\")/lib/target-dir.sh\""));
        if code.iter().any(|l| l.contains("target/release")) || (names_release && !sources) {
            offenders.push(name);
        }
    }
    offenders.sort();
    assert!(offenders.is_empty(), "{offenders:?}");
}
