//! `recached-bench`: the benchmark suite's library, run as the `recached-bench` binary
//! (`src/main.rs`; issue 9).
//!
//! # Layout
//!
//! - [`rng`]: seeded SplitMix64, exponential variates, uniform/zipfian key choice.
//! - [`schedule`]: the Poisson arrival schedule (intended start times).
//! - [`loadgen`]: the open-loop load generator (mio, one poll per thread, HDR histograms), its
//!   parameters, and the cache-aside mode.
//! - [`memcached`]: the memcached text protocol of `run --protocol memcached` (requests, a
//!   full reply scanner, the key-to-server hash of a client with a server list).
//! - [`reply`]: a RESP reply scanner (where a reply ends; value, nil or error).
//! - [`origin`]: a simulated slow origin for the cache-aside scenarios.
//! - [`memory`]: one memory-per-data-shape sample (DBSIZE, RSS, INFO used_memory).
//! - [`doc`]: the result JSON (one file per measurement) and its validation.
//! - [`report`] and [`svg`]: `docs/BENCHMARKS.md` and its SVG charts, generated from the JSON.
//!
//! # Subcommands (`recached-bench SUBCOMMAND`)
//!
//! ```text
//! run               open-loop (or --closed-loop) load against any RESP server, or a memcached
//!                   one with --protocol memcached; prints a summary, --out writes JSON
//! origin            the slow origin server (runs until killed)
//! redis-benchmark   runs redis-benchmark --csv with the given args and records it as JSON
//! rss               samples the RSS of a process tree over time into JSON
//! memory            one memory-per-data-shape sample of a server (DBSIZE, RSS, used_memory)
//! report            renders bench/results/*.json into docs/BENCHMARKS.md + SVG charts
//! check             records the outcome of a script's check (e.g. a restarted engine) as JSON
//! tx-loop           transfers as MULTI/DECRBY/INCRBY/EXEC transactions, closed loop or paced
//! validate          checks result files (schema; --no-errors: no error counted)
//! ```
//!
//! The scripts in `scripts/bench-*.sh` and `scripts/soak.sh` drive these; see
//! docs/BENCHMARKS.md (generated) for what each suite measures.

pub mod consume;
pub mod doc;
pub mod getloop;
pub mod loadgen;
pub mod memcached;
pub mod memory;
pub mod origin;
pub mod reply;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod svg;
pub mod txloop;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `recached-bench …`
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Open-loop load (Poisson arrivals, latency from the intended start), or a closed loop,
    /// against a RESP server or (--protocol memcached) a memcached one.
    Run {
        /// Boxed: the parameters are most of the enum's size.
        #[command(flatten)]
        params: Box<loadgen::LoadParams>,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Serve as a simulated slow origin (cache-aside scenarios) until killed.
    Origin {
        #[command(flatten)]
        params: origin::OriginParams,
    },
    /// Run redis-benchmark (args after `--`, `--csv` is put first) and record its rows as JSON.
    RedisBenchmark {
        #[command(flatten)]
        out: OutArgs,
        /// Name for a custom-command test (redis-benchmark names it after the command line).
        #[arg(long)]
        test_name: Option<String>,
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// Sample the summed RSS of a process and its children (e.g. a fleet's supervisor).
    Rss {
        /// The parent process; it and its direct children are summed at each sample.
        #[arg(long)]
        ppid: u32,
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Stop after this many seconds (or when the parent exits).
        #[arg(long)]
        seconds: f64,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Record one memory sample of a filled server: DBSIZE, its RSS, INFO used_memory.
    Memory {
        #[command(flatten)]
        args: memory::MemoryArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Render result JSON files into Markdown with SVG charts.
    Report {
        /// Folder of result files (*.json, searched recursively).
        #[arg(long, default_value = "bench/results")]
        results: PathBuf,
        /// The Markdown file to write.
        #[arg(long, default_value = "docs/BENCHMARKS.md")]
        out: PathBuf,
        /// Folder for the SVG charts (linked relative to the Markdown file).
        #[arg(long, default_value = "docs/bench")]
        svg_dir: PathBuf,
    },
    /// Record the outcome of a check a script made (e.g. "the killed engine came back").
    Check {
        /// Name of the check.
        #[arg(long)]
        name: String,
        /// Outcome: passed, failed or skipped.
        #[arg(long)]
        outcome: String,
        #[arg(long, default_value = "")]
        detail: String,
        #[command(flatten)]
        out: OutArgs,
    },
    /// The consumer-group loop of a stream job queue (XREADGROUP COUNT n + XACK), closed loop.
    StreamConsume {
        #[command(flatten)]
        args: consume::ConsumeArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Pipelined GETs of random keys, closed loop, optionally with CLIENT TRACKING ON on every
    /// connection (client-side caching's cost; scripts/bench-tracking.sh).
    GetLoop {
        #[command(flatten)]
        args: getloop::GetLoopArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Transfers as transactions (MULTI DECRBY INCRBY EXEC), closed loop or paced
    /// (scripts/bench-transactions.sh).
    TxLoop {
        #[command(flatten)]
        args: txloop::TxLoopArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Check result files: valid JSON of this schema; with --no-errors, no error counted.
    Validate {
        #[arg(long)]
        no_errors: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Where a measurement is written and how it is labelled.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutArgs {
    /// Result JSON file to write.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `key=value` label stored with the result (repeatable): suite, run_id, system, …
    #[arg(long = "label")]
    pub labels: Vec<String>,
}

/// Runs one `recached-bench` subcommand.
pub fn main(cmd: BenchCommand) -> Result<ExitCode, String> {
    match cmd {
        BenchCommand::Run { params, out } => run_load(&params, &out),
        BenchCommand::Origin { params } => {
            let o = origin::spawn(params).map_err(|e| format!("origin: {e}"))?;
            println!("{}", o.addr.port());
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        BenchCommand::RedisBenchmark {
            out,
            test_name,
            args,
        } => redis_benchmark(&out, test_name.as_deref(), &args),
        BenchCommand::Rss {
            ppid,
            interval_ms,
            seconds,
            out,
        } => rss(ppid, interval_ms, seconds, &out),
        BenchCommand::Memory { args, out } => memory::sample(&args, &out),
        BenchCommand::Report {
            results,
            out,
            svg_dir,
        } => {
            let docs = report::load_dir(&results)?;
            report::write(&docs, &out, &svg_dir)?;
            println!("{}: {} result files", out.display(), docs.len());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Check {
            name,
            outcome,
            detail,
            out,
        } => {
            if !matches!(outcome.as_str(), "passed" | "failed" | "skipped") {
                return Err(format!(
                    "--outcome must be passed, failed or skipped, got {outcome:?}"
                ));
            }
            let mut labels = doc::parse_labels(&out.labels)?;
            labels.insert("check".into(), name.clone());
            let results =
                json!({ "outcome": outcome, "passed": outcome == "passed", "detail": detail });
            write_out(
                &out,
                &doc::new_doc("check", &labels, json!({}), json!({}), results),
            )?;
            println!("check {name}: {outcome} ({detail})");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::StreamConsume { args, out } => consume::run(&args, &out),
        BenchCommand::GetLoop { args, out } => getloop::run(&args, &out),
        BenchCommand::TxLoop { args, out } => txloop::run(&args, &out),
        BenchCommand::Validate { no_errors, files } => {
            let mut bad = 0;
            for f in &files {
                let res = std::fs::read_to_string(f)
                    .map_err(|e| e.to_string())
                    .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()))
                    .and_then(|v| doc::validate(&v));
                match res {
                    Ok(n) if no_errors && n > 0 => {
                        eprintln!("{}: {n} errors counted", f.display());
                        bad += 1;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("{}: {e}", f.display());
                        bad += 1;
                    }
                }
            }
            println!("{} files checked, {bad} bad", files.len());
            Ok(if bad == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn write_out(out: &OutArgs, doc: &Value) -> Result<(), String> {
    match &out.out {
        Some(path) => doc::write(path, doc),
        None => Ok(()),
    }
}

/// The JSON `results` object of a load run.
pub fn load_results(params: &loadgen::LoadParams, o: &loadgen::Outcome) -> Value {
    json!({
        "scheduled": o.scheduled,
        "ok": o.ok,
        "errors": o.errors,
        // A closed loop has no target rate.
        "target_rate": if params.closed_loop { Value::Null } else { json!(params.rate) },
        // A run ended by its stop file lasted its measured time, not `duration`.
        "achieved_rate": (o.achieved_rate(if params.stop_file.is_some() { 0.0 } else { params.duration }) * 10.0).round() / 10.0,
        "latency_us": loadgen::Outcome::summary(&o.latency),
        "service_us": loadgen::Outcome::summary(&o.service),
        "lag_us": loadgen::Outcome::summary(&o.lag),
        "origin_calls": o.origin_calls,
        "cache_hits": o.cache_hits,
        "cache_misses": o.cache_misses,
        "reconnects": o.reconnects,
        "elapsed_s": (o.elapsed_s * 1000.0).round() / 1000.0,
    })
}

fn run_load(params: &loadgen::LoadParams, out: &OutArgs) -> Result<ExitCode, String> {
    let labels = doc::parse_labels(&out.labels)?;
    let first = params.target.split(',').next().unwrap_or_default();
    let server = if params.protocol == "memcached" {
        memcached::server_info(first)
    } else {
        loadgen::server_info(first)
    };
    let origin = params
        .origin
        .as_deref()
        .map(loadgen::server_info)
        .unwrap_or_default();
    let o = loadgen::run(params)?;
    if let Some(f) = &params.timeline {
        std::fs::write(f, o.timeline_csv()).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    let results = load_results(params, &o);
    let l = &results["latency_us"];
    let rate = if params.closed_loop {
        "closed loop".to_string()
    } else {
        format!("rate {}/s", params.rate)
    };
    println!(
        "target {} {rate}: achieved {}/s, ok {}, errors {}, latency µs p50 {} p90 {} p99 {} p99.9 {} max {} (service p99 {}, lag p99 {})",
        params.target,
        results["achieved_rate"],
        o.ok,
        o.error_count(),
        l["p50"],
        l["p90"],
        l["p99"],
        l["p999"],
        l["max"],
        results["service_us"]["p99"],
        results["lag_us"]["p99"],
    );
    if !o.errors.is_empty() {
        println!("errors: {:?}", o.errors);
    }
    if params.protocol == "memcached" && (o.cache_hits + o.cache_misses) > 0 {
        println!("get hits {}, misses {}", o.cache_hits, o.cache_misses);
    }
    if params.mode == "cache-aside" {
        println!(
            "cache hits {}, misses {}, origin calls {}",
            o.cache_hits, o.cache_misses, o.origin_calls
        );
    }
    let params_json = serde_json::to_value(params).map_err(|e| e.to_string())?;
    let versions = json!({ "server": server, "origin": origin });
    write_out(
        out,
        &doc::new_doc("loadgen", &labels, versions, params_json, results),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Splits one CSV line with double-quoted fields (RFC 4180, no embedded newlines).
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Parses redis-benchmark's `--csv` output into `[{test, rps, avg_ms, p50_ms, …}]`.
pub fn parse_redis_benchmark_csv(text: &str, test_name: Option<&str>) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut header: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let f = csv_fields(line);
        if f.first().map(String::as_str) == Some("test") {
            header = f;
            continue;
        }
        let mut row = serde_json::Map::new();
        for (i, v) in f.iter().enumerate() {
            let key = header.get(i).cloned().unwrap_or_else(|| format!("col{i}"));
            if i == 0 {
                let name = test_name.map(str::to_string).unwrap_or_else(|| v.clone());
                row.insert("test".into(), Value::String(name));
            } else if let Ok(x) = v.parse::<f64>() {
                row.insert(key, json!(x));
            }
        }
        rows.push(Value::Object(row));
    }
    rows
}

/// The run parameters redis-benchmark was given, by their meaning.
fn redis_benchmark_params(args: &[String]) -> Value {
    let mut m = serde_json::Map::new();
    let names: BTreeMap<&str, &str> = [
        ("-n", "requests"),
        ("-c", "concurrency"),
        ("-d", "value_size"),
        ("-r", "key_space"),
        ("-P", "pipeline"),
        ("-t", "tests"),
        ("-h", "host"),
        ("-p", "port"),
        ("--threads", "threads"),
    ]
    .into_iter()
    .collect();
    let mut i = 0;
    while i < args.len() {
        if let Some(name) = names.get(args[i].as_str()).filter(|_| i + 1 < args.len()) {
            m.insert(name.to_string(), json!(args[i + 1]));
            i += 2;
            continue;
        }
        if args[i] == "--cluster" {
            m.insert("cluster".into(), json!(true));
        }
        i += 1;
    }
    m.entry("pipeline").or_insert(json!("1"));
    m.entry("value_size").or_insert(json!("3"));
    let dist = if m.contains_key("key_space") {
        "uniform (-r)"
    } else {
        "single key"
    };
    m.insert("key_distribution".into(), json!(dist));
    m.insert("args".into(), json!(args));
    Value::Object(m)
}

fn redis_benchmark(
    out: &OutArgs,
    test_name: Option<&str>,
    args: &[String],
) -> Result<ExitCode, String> {
    let labels = doc::parse_labels(&out.labels)?;
    let version = std::process::Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    // `--csv` first: after a custom command (`mget key:__rand_int__ …`) it would be read as
    // one more argument of that command.
    let output = std::process::Command::new("redis-benchmark")
        .arg("--csv")
        .args(args)
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error_lines: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("moved") || l.contains("crossslot")
        })
        .collect();
    let rows = parse_redis_benchmark_csv(&stdout, test_name);
    let mut error_lines: Vec<&str> = error_lines;
    let mut errors = error_lines.len() as u64;
    if !output.status.success() || rows.is_empty() {
        errors += 1;
        error_lines.extend(stderr.lines().rev().take(3));
    }
    for l in error_lines.iter().take(5) {
        eprintln!("redis-benchmark: {l}");
    }
    for r in &rows {
        println!("{}: {} rps", r["test"], r["rps"]);
    }
    let host = args
        .iter()
        .position(|a| a == "-h")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = args
        .iter()
        .position(|a| a == "-p")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "6379".into());
    let server = loadgen::server_info(&format!("{host}:{port}"));
    let versions = json!({ "redis_benchmark": version, "server": server });
    let results = json!({
        "tests": rows,
        "errors": errors,
        "error_lines": error_lines.iter().take(5).collect::<Vec<_>>(),
        "exit_status": output.status.code(),
    });
    let d = doc::new_doc(
        "redis-benchmark",
        &labels,
        versions,
        redis_benchmark_params(args),
        results,
    );
    write_out(out, &d)?;
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// RSS in bytes of one process, from /proc/PID/status (VmRSS, in kB).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `pid` and its direct children (from /proc/*/stat field 4, the parent pid).
fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let mut stat = String::new();
        if std::fs::File::open(format!("/proc/{p}/stat"))
            .and_then(|mut f| f.read_to_string(&mut stat))
            .is_err()
        {
            continue;
        }
        // The command name (field 2) may hold spaces: split after its closing parenthesis.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok())
            == Some(pid)
        {
            out.push(p);
        }
    }
    out
}

fn rss(ppid: u32, interval_ms: u64, seconds: f64, out: &OutArgs) -> Result<ExitCode, String> {
    let labels = doc::parse_labels(&out.labels)?;
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds.max(0.0));
    let mut samples = Vec::new();
    while start.elapsed() <= limit {
        if !Path::new(&format!("/proc/{ppid}")).exists() {
            break;
        }
        let pids = process_tree(ppid);
        let total: u64 = pids.iter().filter_map(|&p| rss_bytes(p)).sum();
        samples.push(json!({
            "t_s": (start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            "rss_bytes": total,
            "processes": pids.len(),
        }));
        // Rewritten after every sample, so a killed sampler still leaves its data.
        let params = json!({ "ppid": ppid, "interval_ms": interval_ms, "seconds": seconds });
        let d = doc::new_doc(
            "rss",
            &labels,
            json!({}),
            params,
            json!({ "samples": samples }),
        );
        write_out(out, &d)?;
        std::thread::sleep(Duration::from_millis(interval_ms.max(10)));
    }
    Ok(ExitCode::SUCCESS)
}
