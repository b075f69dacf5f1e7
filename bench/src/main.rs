//! `recached-bench`: the benchmark tools as their own binary (subcommands: see the library's
//! docs, `bench/src/lib.rs`). They used to be `recached bench …`; a separate binary keeps their
//! code and dependencies (serde_json, hdrhistogram, the report and SVG writers) out of the
//! production `recached`. Exit status as there: 0 on success, 1 on an error (logged to stderr) or
//! a failed check (e.g. `validate` found a bad file), 2 on bad flags (clap's convention).

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "recached-bench",
    version,
    about = "Benchmark tools of recached: open-loop load generator, slow origin, report"
)]
struct Cli {
    #[command(subcommand)]
    command: recached_bench::BenchCommand,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The same logger set-up as `recached`'s, so the tools print what they printed there.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match recached_bench::main(cli.command) {
        Ok(code) => code,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
