//! The `recached-bench` binary itself: every subcommand the scripts call is there, and a result
//! written by one subcommand is read back by another (the wiring of `src/main.rs`).

use std::path::PathBuf;
use std::process::Command;

fn bench_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_recached-bench"))
}

#[test]
fn help_lists_every_subcommand() {
    let out = bench_bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for sub in [
        "run",
        "origin",
        "redis-benchmark",
        "rss",
        "memory",
        "report",
        "check",
        "validate",
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
            "`{sub}` missing from:\n{help}"
        );
    }
}

#[test]
fn check_then_validate() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("check.json");
    let st = bench_bin()
        .args([
            "check",
            "--name",
            "cli",
            "--outcome",
            "passed",
            "--label",
            "suite=soak",
            "--out",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let st = bench_bin()
        .args(["validate", "--no-errors"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    // A bad flag is clap's exit status 2, as it was under `recached bench`.
    let st = bench_bin()
        .args(["check", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(2), "{st:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
