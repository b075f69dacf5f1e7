//! Compiles the browser replica (`recached-wasm`, the crate one folder up) for
//! `wasm32-unknown-unknown` and leaves it in `OUT_DIR/recached.wasm`, which `lib.rs` embeds, so
//! the binary serves `/recached.wasm` with no source tree and no separate step around it.
//!
//! It is a second cargo build with its own target directory (`<target>/wasm-embed`: the outer
//! build holds the lock on its own directories, and one shared directory keeps the debug and
//! release builds of this crate from compiling the module twice), with the size settings of
//! scripts/build-wasm.sh. When it cannot run (no `wasm32-unknown-unknown` target for this
//! toolchain, e.g. a fuzzing nightly, or `RECACHED_WWW_NO_WASM` set), the file is left empty,
//! cargo prints a warning, and the fan-out serves the module from a file instead (`--wasm`,
//! `RECACHED_WASM`, or scripts/build-wasm.sh's output).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let out = out_dir.join("recached.wasm");
    let ws = manifest_dir.join("../..");
    for path in [
        "wasm/src",
        "wasm/Cargo.toml",
        "engine/core/src",
        "engine/core/Cargo.toml",
        "engine/resp/src",
        "engine/resp/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", ws.join(path).display());
    }
    println!("cargo:rerun-if-env-changed=RECACHED_WWW_NO_WASM");
    let built = if env::var_os("RECACHED_WWW_NO_WASM").is_some() {
        Err("RECACHED_WWW_NO_WASM is set".to_string())
    } else {
        build(&ws, &out_dir)
    };
    match built {
        Ok(module) => std::fs::copy(&module, &out).map(drop),
        Err(why) => {
            println!(
                "cargo:warning=recached.wasm not embedded ({why}); the fan-out will serve \
                 it from a file (scripts/build-wasm.sh, --wasm or RECACHED_WASM)"
            );
            std::fs::write(&out, b"")
        }
    }
    .expect("write OUT_DIR/recached.wasm");
}

/// Runs the nested build; the path of the module it wrote.
fn build(ws: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .map_or_else(|| out_dir.join("wasm-embed"), |t| t.join("wasm-embed"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(ws)
        .args(["build", "--release", "--locked", "-p", "recached-wasm"])
        .args(["--target", "wasm32-unknown-unknown", "--target-dir"])
        .arg(&target_dir)
        // Size settings of scripts/build-wasm.sh, for this build only.
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    // The outer build's flags are for the native target (sanitizers under cargo-fuzz, …).
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "cargo build -p recached-wasm --target wasm32-unknown-unknown: {status}"
        ));
    }
    Ok(target_dir.join("wasm32-unknown-unknown/release/recached_wasm.wasm"))
}
