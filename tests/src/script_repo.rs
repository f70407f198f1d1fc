//! A script of `scripts/` run as a user meets it, without what it would
//! build or start: a copy of the repository's layout holding the real
//! script and `scripts/lib/`, fakes (small shell scripts) for the programs
//! it runs, which append a line to a log when they run, and an empty
//! folder to run it from.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::OpenDir;

/// The repository's `scripts/` folder.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

/// Writes an executable shell script `body` (after `#!/bin/sh`) at `path`.
pub fn fake_program(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A copy of the repository's layout for one script (see the module
/// documentation): `repo/` (the script, `scripts/lib/`), `bin/` (fakes
/// found first on `PATH`), `cwd/` (where the script is started) and `log`
/// (what the fakes wrote down). Removed when dropped.
#[derive(Debug)]
pub struct ScriptRepo {
    /// The folder holding it all.
    pub dir: OpenDir,
    script: String,
}

impl ScriptRepo {
    /// The layout for `scripts/NAME`, under a folder named after `tag`.
    pub fn new(tag: &str, name: &str) -> ScriptRepo {
        let dir = OpenDir::new(tag);
        let scripts = dir.path("repo/scripts");
        std::fs::create_dir_all(scripts.join("lib")).unwrap();
        std::fs::copy(scripts_dir().join(name), scripts.join(name)).unwrap();
        for lib in std::fs::read_dir(scripts_dir().join("lib")).unwrap() {
            let lib = lib.unwrap().path();
            std::fs::copy(&lib, scripts.join("lib").join(lib.file_name().unwrap())).unwrap();
        }
        std::fs::create_dir_all(dir.path("cwd")).unwrap();
        std::fs::create_dir_all(dir.path("bin")).unwrap();
        ScriptRepo {
            dir,
            script: name.to_string(),
        }
    }

    /// A fake `name` first on the script's `PATH` (`cargo`, `id`, ...).
    pub fn fake_on_path(&self, name: &str, body: &str) {
        fake_program(&self.dir.path("bin").join(name), body);
    }

    /// A fake that only writes down that it ran (`NAME ARGS`) and exits 0.
    pub fn logging(name: &str) -> String {
        format!("echo \"{name} $*\" >>\"$FAKE_LOG\"\n")
    }

    /// The script with `args` from `cwd/`, with `env` set and SIGINT at its
    /// default disposition.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // SIGINT at its default, as a terminal starts a script: a test run
        // started in the background (`cmd &` ignores SIGINT, and a shell
        // cannot trap a signal ignored at its start) must not change what
        // a script does on Ctrl-C.
        Command::new("env")
            .args(["--default-signal=INT", "bash"])
            .arg(self.dir.path("repo/scripts").join(&self.script))
            .args(args)
            .current_dir(self.dir.path("cwd"))
            .env("PATH", path)
            .env("FAKE_LOG", self.dir.path("log"))
            .env_remove("CARGO_TARGET_DIR")
            .envs(env.iter().copied())
            .output()
            .expect("running the script")
    }

    /// What the fakes wrote down, in order.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("log")).unwrap_or_default()
    }

    /// Whether the fake `program` ran (a line of the log begins with it).
    pub fn ran(&self, program: &str) -> bool {
        self.log()
            .lines()
            .any(|l| l.split(' ').next() == Some(program))
    }
}
