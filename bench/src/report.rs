//! `recached-bench report`: renders the result JSON ([`crate::doc`]) into `docs/BENCHMARKS.md`
//! and SVG charts. Every figure in that file comes from a result file; the prose around the
//! figures is fixed text here. Nobody edits BENCHMARKS.md by hand.
//!
//! Rules:
//! - Files are grouped by the `suite` label; of each suite only the newest `run_id` is shown
//!   (runs of a suite are not mixed). Within a run, repeated rounds of the same measurement are
//!   reduced to their **median** (each percentile separately).
//! - Sections, in order: scaling (`suite=scaling`), systems (`suite=systems`: throughput from
//!   redis-benchmark, latency from the open-loop generator), scenarios (`suite=scenarios`),
//!   soak (`suite=soak`), memory per data shape (`suite=memory`, kind `memory`, written by
//!   `recached-bench memory`). A suite without files is left out.
//! - Scaling states in words what the run can show: the median ratio of the largest to the
//!   smallest engine count, and, when the host has fewer CPUs than the largest run keeps busy
//!   (engines + proxy + generator), that it cannot show scaling at all.
//! - Latencies are stored in microseconds and shown in milliseconds; rates per second.
//!
//! [`render`] is pure (documents in, Markdown and SVG text out), so it is tested on fixed input;
//! [`write()`] does the file I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::svg;

/// One result file.
#[derive(Debug, Clone)]
pub struct Doc {
    pub path: String,
    pub v: Value,
}

impl Doc {
    pub fn label(&self, k: &str) -> &str {
        self.v["labels"][k].as_str().unwrap_or("")
    }
    fn kind(&self) -> &str {
        self.v["kind"].as_str().unwrap_or("")
    }
    fn num(&self, path: &[&str]) -> f64 {
        let mut v = &self.v;
        for p in path {
            v = &v[*p];
        }
        v.as_f64().unwrap_or(0.0)
    }
}

/// Reads every `*.json` under `dir` (recursively, sorted by path). Files that are not result
/// documents are reported on stderr and skipped.
pub fn load_dir(dir: &Path) -> Result<Vec<Doc>, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut paths = Vec::new();
    walk(dir, &mut paths).map_err(|e| format!("{}: {e}", dir.display()))?;
    paths.sort();
    let mut docs = Vec::new();
    for p in paths {
        let parsed = std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()))
            .and_then(|v| crate::doc::validate(&v).map(|_| v));
        match parsed {
            Ok(v) => docs.push(Doc {
                path: p.display().to_string(),
                v,
            }),
            Err(e) => eprintln!("report: skipping {}: {e}", p.display()),
        }
    }
    Ok(docs)
}

/// The rendered report.
pub struct Rendered {
    pub markdown: String,
    /// (file name, SVG text)
    pub charts: Vec<(String, String)>,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// 1234567.8 → "1,234,568".
pub fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 && s != "0" {
        format!("-{out}")
    } else {
        out
    }
}

/// Microseconds → milliseconds text with 2 decimals ("0.05", "101.38").
pub fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

/// Relative change in percent, signed: "+12%", "-3%", "n/a" when the base is 0.
pub fn change(from: f64, to: f64) -> String {
    if from <= 0.0 {
        return "n/a".into();
    }
    let pct = (to / from - 1.0) * 100.0;
    format!("{}{:.0}%", if pct >= 0.0 { "+" } else { "" }, pct)
}

/// Orders strings that are numbers numerically, the rest after them alphabetically.
fn num_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        _ => a.cmp(b),
    }
}

/// The newest run of each suite: suite → docs of that run.
fn latest_runs(docs: &[Doc]) -> BTreeMap<String, Vec<&Doc>> {
    let mut newest: BTreeMap<&str, &str> = BTreeMap::new();
    for d in docs {
        let e = newest.entry(d.label("suite")).or_insert(d.label("run_id"));
        if d.label("run_id") > *e {
            *e = d.label("run_id");
        }
    }
    let mut out: BTreeMap<String, Vec<&Doc>> = BTreeMap::new();
    for d in docs {
        if newest.get(d.label("suite")) == Some(&d.label("run_id")) {
            out.entry(d.label("suite").to_string()).or_default().push(d);
        }
    }
    out
}

/// `a, b (pinned)` style summary of one label over a run's documents.
pub(crate) fn label_values(docs: &[&Doc], k: &str) -> String {
    let set: BTreeSet<&str> = docs
        .iter()
        .map(|d| d.label(k))
        .filter(|s| !s.is_empty())
        .collect();
    if set.is_empty() {
        "not recorded".into()
    } else {
        set.into_iter().collect::<Vec<_>>().join(", ")
    }
}

/// The common "what ran" line of a section: run id, versions, placement, persistence.
pub(crate) fn run_line(md: &mut String, docs: &[&Doc]) {
    let _ = writeln!(
        md,
        "Run `{}`; recached {}; redis-server {}; CPU placement: {}; persistence: {}; rounds: {}.\n",
        label_values(docs, "run_id"),
        label_values(docs, "recached_version"),
        label_values(docs, "redis_version"),
        label_values(docs, "cpu_placement"),
        label_values(docs, "persistence"),
        label_values(docs, "rounds"),
    );
}

/// Median rps per (group key, test) over the redis-benchmark docs, grouped by `key(doc)`.
/// Docs of one round that share a key and carry different `part` labels ran at the same time
/// against different servers (N independent redis-servers): their rates are summed first.
fn rb_medians<F: Fn(&Doc) -> String>(docs: &[&Doc], key: F) -> BTreeMap<(String, String), f64> {
    let mut rounds: BTreeMap<(String, String), BTreeMap<String, f64>> = BTreeMap::new();
    for d in docs.iter().filter(|d| d.kind() == "redis-benchmark") {
        let round = match d.label("round") {
            "" => d.path.clone(),
            r => r.to_string(),
        };
        for row in d.v["results"]["tests"].as_array().into_iter().flatten() {
            let test = row["test"].as_str().unwrap_or("?").to_string();
            let rps = row["rps"].as_f64().unwrap_or(0.0);
            *rounds
                .entry((key(d), test))
                .or_default()
                .entry(round.clone())
                .or_default() += rps;
        }
    }
    rounds
        .into_iter()
        .map(|(k, v)| (k, median(v.into_values().collect())))
        .collect()
}

/// redis-benchmark's own test order first, anything else after it by name.
fn sort_tests(tests: &mut [String]) {
    const ORDER: [&str; 8] = [
        "SET", "GET", "INCR", "MSET", "LPUSH", "SADD", "HSET", "ZADD",
    ];
    let rank = |t: &str| ORDER.iter().position(|o| *o == t).unwrap_or(ORDER.len());
    tests.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
}

/// "proxy" before "direct", anything else after them by name.
fn sort_paths(paths: &mut [String]) {
    let rank = |p: &str| match p {
        "proxy" => 0,
        "direct" => 1,
        _ => 2,
    };
    paths.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
}

fn first_seen<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen = Vec::<String>::new();
    for s in it {
        if !seen.iter().any(|x| x == s) {
            seen.push(s.to_string());
        }
    }
    seen
}

fn scaling(md: &mut String, charts: &mut Vec<(String, String)>, docs: &[&Doc], svg_rel: &str) {
    md.push_str("## Scaling with the engine count (`scripts/bench-scaling.sh`)\n\n");
    md.push_str(
        "One release binary; only the number of engines changes. Throughput (requests/s, median of \
         the rounds) of redis-benchmark through the proxy and direct to the engines \
         (`redis-benchmark --cluster`); each cell after the first shows the change against the \
         column before it. SET/GET/INCR are spread over a key space; LPUSH/SADD/HSET/ZADD each \
         write into one key, so they stay on one engine whatever the engine count. With one \
         engine, *direct* is plain redis-benchmark (it refuses `--cluster` with a single node), \
         so the first direct column and the others differ in client mode as well.\n\n",
    );
    run_line(md, docs);
    let verified = label_values(docs, "engines_reported");
    let _ = writeln!(
        md,
        "Engine counts reported by `recached status --json` before each run: {verified}.\n"
    );
    let med = rb_medians(docs, |d| {
        format!("{}|{}", d.label("path"), d.label("engines"))
    });
    let mut engines: Vec<String> = docs
        .iter()
        .map(|d| d.label("engines").to_string())
        .collect();
    engines.sort_by(|a, b| num_order(a, b));
    engines.dedup();
    let mut paths = first_seen(docs.iter().map(|d| d.label("path")));
    sort_paths(&mut paths);
    let mut tests = first_seen(med.keys().map(|(_, t)| t.as_str()));
    sort_tests(&mut tests);
    let _ = write!(md, "| test | path |");
    for e in &engines {
        let _ = write!(md, " {e} engine{} |", if e == "1" { "" } else { "s" });
    }
    md.push_str("\n|---|---|");
    md.push_str(&"---:|".repeat(engines.len()));
    md.push('\n');
    for path in &paths {
        for test in &tests {
            let cells: Vec<Option<f64>> = engines
                .iter()
                .map(|e| med.get(&(format!("{path}|{e}"), test.clone())).copied())
                .collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let _ = write!(md, "| {test} | {path} |");
            let mut prev: Option<f64> = None;
            for c in &cells {
                match (c, prev) {
                    (Some(v), Some(p)) => {
                        let _ = write!(md, " {} ({}) |", thousands(*v), change(p, *v));
                    }
                    (Some(v), None) => {
                        let _ = write!(md, " {} |", thousands(*v));
                    }
                    (None, _) => md.push_str(" – |"),
                }
                prev = *c;
            }
            md.push('\n');
        }
    }
    md.push('\n');
    scaling_verdict(md, docs, &engines, &paths, &tests, &med);
    for path in &paths {
        let series: Vec<(String, Vec<(f64, f64)>)> = tests
            .iter()
            .map(|t| {
                let pts = engines
                    .iter()
                    .filter_map(|e| {
                        let v = med.get(&(format!("{path}|{e}"), t.clone()))?;
                        Some((e.parse::<f64>().ok()?, *v))
                    })
                    .collect();
                (t.clone(), pts)
            })
            .filter(|(_, p): &(String, Vec<_>)| !p.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let name = format!("scaling-{}.svg", sanitize(path));
        charts.push((
            name.clone(),
            svg::line_chart(
                &format!("Throughput by engine count ({path})"),
                "engines",
                "requests/s",
                &series,
            ),
        ));
        let _ = writeln!(
            md,
            "![Throughput by engine count, {path}]({svg_rel}/{name})\n"
        );
    }
}

/// What the scaling table can show on this host, said in words: the median over the tests of
/// the throughput at the largest engine count ÷ at the smallest, per path, and, when the host
/// has fewer CPUs than the busy processes of the largest run (its engines, the proxy and the
/// generator), that the run cannot show scaling at all.
fn scaling_verdict(
    md: &mut String,
    docs: &[&Doc],
    engines: &[String],
    paths: &[String],
    tests: &[String],
    med: &BTreeMap<(String, String), f64>,
) {
    let (Some(lo), Some(hi)) = (engines.first(), engines.last()) else {
        return;
    };
    if lo == hi {
        return;
    }
    let ratios: Vec<String> = paths
        .iter()
        .filter_map(|path| {
            let r: Vec<f64> = tests
                .iter()
                .filter_map(|t| {
                    let a = med.get(&(format!("{path}|{lo}"), t.clone()))?;
                    let b = med.get(&(format!("{path}|{hi}"), t.clone()))?;
                    (*a > 0.0).then(|| b / a)
                })
                .collect();
            (!r.is_empty()).then(|| format!("{:.2}× {path}", median(r)))
        })
        .collect();
    if !ratios.is_empty() {
        let _ = writeln!(
            md,
            "Throughput with {hi} engines ÷ with {lo}, median over the tests: {}.\n",
            ratios.join(", ")
        );
    }
    let cpus = docs
        .iter()
        .filter_map(|d| d.v["host"]["cpus"].as_u64())
        .max()
        .unwrap_or(0);
    let busy = hi.parse::<u64>().unwrap_or(0) + 2;
    if cpus > 0 && cpus < busy {
        let _ = writeln!(
            md,
            "**This run cannot show scaling.** The host has {cpus} CPUs; the {hi}-engine run \
             keeps {busy} processes busy ({hi} engines, the proxy and redis-benchmark), and \
             the load generator shares the CPUs with the servers it measures. Past what the \
             CPUs can run side by side, another engine adds context switches, not capacity, so \
             a flat or falling row here is the expected result and says nothing about a larger \
             machine. To see scaling, give every engine, the proxy and the generator a core of their \
             own: `PIN=1 SERVER_CPUS=… BENCH_CPUS=… scripts/bench-scaling.sh`.\n"
        );
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Median of each latency figure per (group) over loadgen docs.
struct LatRow {
    rate: f64,
    achieved: f64,
    errors: f64,
    p: [f64; 5],
    service_p99: f64,
    /// How late the generator itself issued requests (p99): when this is close to p99, the
    /// generator was starved of CPU and the row measures the host, not the server.
    lag_p99: f64,
}

fn lat_rows<F: Fn(&Doc) -> String>(docs: &[&Doc], key: F) -> Vec<(String, LatRow)> {
    let order = first_seen(
        docs.iter()
            .filter(|d| d.kind() == "loadgen")
            .map(|d| key(d))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    order
        .into_iter()
        .map(|k| {
            let group: Vec<&&Doc> = docs
                .iter()
                .filter(|d| d.kind() == "loadgen" && key(d) == k)
                .collect();
            let m = |path: &[&str]| median(group.iter().map(|d| d.num(path)).collect());
            let errors = median(
                group
                    .iter()
                    .map(|d| crate::doc::validate(&d.v).unwrap_or(0) as f64)
                    .collect(),
            );
            let p = ["p50", "p90", "p99", "p999", "max"].map(|q| m(&["results", "latency_us", q]));
            let row = LatRow {
                rate: m(&["results", "target_rate"]),
                achieved: m(&["results", "achieved_rate"]),
                errors,
                p,
                service_p99: m(&["results", "service_us", "p99"]),
                lag_p99: m(&["results", "lag_us", "p99"]),
            };
            (k, row)
        })
        .collect()
}

fn systems(md: &mut String, charts: &mut Vec<(String, String)>, docs: &[&Doc], svg_rel: &str) {
    md.push_str("## Systems side by side (`scripts/bench-systems.sh`)\n\n");
    md.push_str(
        "The same workloads against each system in one run, in interleaved rounds (the order \
         rotates every round), each from an empty keyspace: recached through its proxy and \
         direct to its engines (cluster protocol), one redis-server, N independent redis-servers \
         sharded by the client (`recached-bench run`: key number mod N; redis-benchmark: one \
         instance per server at the same time, throughputs summed), nutcracker in front of N \
         redis-servers, and a real N-node Redis Cluster.\n\n",
    );
    run_line(md, docs);
    // Rows in the order the script lists the systems (`sys_order` label), not by file name.
    let mut docs: Vec<&Doc> = docs.to_vec();
    docs.sort_by(|a, b| num_order(a.label("sys_order"), b.label("sys_order")));
    let docs = &docs[..];
    let rb: Vec<&Doc> = docs
        .iter()
        .copied()
        .filter(|d| d.kind() == "redis-benchmark")
        .collect();
    if !rb.is_empty() {
        md.push_str("### Throughput (closed loop, redis-benchmark; requests/s, median)\n\n");
        let med = rb_medians(&rb, |d| d.label("system").to_string());
        let systems = first_seen(rb.iter().map(|d| d.label("system")));
        let mut tests = first_seen(med.keys().map(|(_, t)| t.as_str()));
        sort_tests(&mut tests);
        let _ = writeln!(md, "| system | {} |", tests.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(tests.len()));
        for s in &systems {
            let cells: Vec<String> = tests
                .iter()
                .map(|t| {
                    med.get(&(s.clone(), t.clone()))
                        .map_or("–".into(), |v| thousands(*v))
                })
                .collect();
            let _ = writeln!(md, "| {s} | {} |", cells.join(" | "));
        }
        let params = &rb[0].v["params"];
        let _ = writeln!(
            md,
            "\nredis-benchmark settings: {} clients, {} requests per test, {}-byte values, key space {}, pipeline {}.\n",
            params["concurrency"].as_str().unwrap_or("?"),
            params["requests"].as_str().unwrap_or("?"),
            params["value_size"].as_str().unwrap_or("?"),
            params["key_space"].as_str().unwrap_or("?"),
            label_values(&rb, "pipeline"),
        );
    }
    let lg: Vec<&Doc> = docs
        .iter()
        .copied()
        .filter(|d| d.kind() == "loadgen")
        .collect();
    if !lg.is_empty() {
        md.push_str("### Latency at a fixed offered rate (open loop, `recached-bench run`)\n\n");
        md.push_str(
            "Poisson arrivals at the target rate; latency from each request's intended start, so \
             queueing behind a slow reply is counted (no coordinated omission). Milliseconds, \
             median over the rounds. *service p99* is the same requests timed from when they \
             were written, which is what a closed-loop tool would report. *generator lag \
             p99* is how late the generator itself sent requests: where it is close to p99, \
             the generator was starved of CPU and the row measures the host, not the \
             server.\n\n",
        );
        let p = &lg[0].v["params"];
        let _ = writeln!(
            md,
            "Settings: {} connections, pipeline {}, mix `{}`, {} distribution over {} keys, {}-byte values, {} s measured after {} s warm-up, seed {}.\n",
            p["connections"],
            p["pipeline"],
            p["mix"].as_str().unwrap_or("?"),
            p["distribution"].as_str().unwrap_or("?"),
            p["keys"],
            p["value_size"],
            p["duration"],
            p["warmup"],
            p["seed"],
        );
        let rows = lat_rows(&lg, |d| d.label("system").to_string());
        md.push_str("| system | target/s | achieved/s | errors | p50 | p90 | p99 | p99.9 | max | service p99 | generator lag p99 |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (s, r) in &rows {
            let _ = writeln!(
                md,
                "| {s} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                thousands(r.rate),
                thousands(r.achieved),
                thousands(r.errors),
                ms(r.p[0]),
                ms(r.p[1]),
                ms(r.p[2]),
                ms(r.p[3]),
                ms(r.p[4]),
                ms(r.service_p99),
                ms(r.lag_p99),
            );
        }
        let groups: Vec<String> = rows.iter().map(|(s, _)| s.clone()).collect();
        let series: Vec<(String, Vec<f64>)> = ["p50", "p90", "p99", "p99.9"]
            .iter()
            .enumerate()
            .map(|(i, q)| {
                (
                    q.to_string(),
                    rows.iter().map(|(_, r)| r.p[i] / 1000.0).collect(),
                )
            })
            .collect();
        let name = "latency-systems.svg".to_string();
        charts.push((
            name.clone(),
            svg::bar_chart(
                "Latency percentiles per system (open loop)",
                "ms (log scale)",
                &groups,
                &series,
                true,
            ),
        ));
        let _ = writeln!(
            md,
            "\n![Latency percentiles per system]({svg_rel}/{name})\n"
        );
    }
}

fn scenarios(md: &mut String, docs: &[&Doc]) {
    md.push_str("## Deployment scenarios (`scripts/bench-scenarios.sh`)\n\n");
    md.push_str(
        "Cache-aside in front of a simulated slow origin (`recached-bench origin`: a fixed wait \
         plus CPU time serialised on one core). Each scenario replays identical traffic (same \
         seed, rate and keys) once straight at the origin (*without*) and once through recached \
         (*with*: GET, on a miss read the origin and SET with the scenario's TTL). Latency is \
         from the intended start, in milliseconds, median over rounds.\n\n",
    );
    run_line(md, docs);
    let scen = first_seen(docs.iter().map(|d| d.label("scenario")));
    md.push_str("| scenario | settings | origin calls without | with | reduction | hit ratio | p99 without | p99 with | p99 change | errors |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for s in &scen {
        let pick = |variant: &str| -> Vec<&Doc> {
            docs.iter()
                .copied()
                .filter(|d| d.label("scenario") == s && d.label("variant") == variant)
                .collect()
        };
        let (without, with) = (pick("without"), pick("with"));
        if without.is_empty() || with.is_empty() {
            continue;
        }
        let m = |g: &[&Doc], path: &[&str]| median(g.iter().map(|d| d.num(path)).collect());
        let calls_without = m(&without, &["results", "scheduled"]);
        let calls_with = m(&with, &["results", "origin_calls"]);
        let hits = m(&with, &["results", "cache_hits"]);
        let misses = m(&with, &["results", "cache_misses"]);
        let p99w = m(&without, &["results", "latency_us", "p99"]);
        let p99c = m(&with, &["results", "latency_us", "p99"]);
        let errs: f64 = without
            .iter()
            .chain(with.iter())
            .map(|d| crate::doc::validate(&d.v).unwrap_or(0) as f64)
            .sum();
        let reduction = if calls_without > 0.0 {
            format!("{:.1}%", (1.0 - calls_with / calls_without) * 100.0)
        } else {
            "n/a".into()
        };
        let hit_ratio = if hits + misses > 0.0 {
            format!("{:.1}%", hits / (hits + misses) * 100.0)
        } else {
            "n/a".into()
        };
        let _ = writeln!(
            md,
            "| {s} | {} | {} | {} | {reduction} | {hit_ratio} | {} | {} | {} | {} |",
            with[0].label("settings"),
            thousands(calls_without),
            thousands(calls_with),
            ms(p99w),
            ms(p99c),
            change(p99w, p99c),
            thousands(errs),
        );
    }
    md.push('\n');
}

/// The soak's section; `memcached`: scripts/soak-memcached.sh's (suite `soak-memcached`), the
/// same phases over the proxy's memcached port.
fn soak(
    md: &mut String,
    charts: &mut Vec<(String, String)>,
    docs: &[&Doc],
    svg_rel: &str,
    memcached: bool,
) {
    let (tag, port) = if memcached {
        (
            "soak-memcached",
            "the proxy's memcached port (`--protocol memcached`)",
        )
    } else {
        ("soak", "the proxy")
    };
    let _ = writeln!(md, "## Soak (`scripts/{tag}.sh`)\n");
    let _ = write!(
        md,
        "One fleet under open-loop load through {port}, phase after phase. "
    );
    md.push_str(
        "Errors are counted \
         per phase by kind; in the *kill* phase one engine is SIGKILLed mid-load and restarted by \
         the supervisor, so errors are expected there and only there. RSS is the sum over the \
         supervisor and its children.\n\n",
    );
    run_line(md, docs);
    let mut phases: Vec<&Doc> = docs
        .iter()
        .copied()
        .filter(|d| d.kind() == "loadgen")
        .collect();
    phases.sort_by(|a, b| num_order(a.label("order"), b.label("order")));
    if !phases.is_empty() {
        md.push_str("| phase | what | target/s | achieved/s | ok | errors | error kinds | p50 | p99 | max | reconnects |\n");
        md.push_str("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n");
        for d in &phases {
            let kinds: Vec<String> = d.v["results"]["errors"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                d.label("phase"),
                d.label("what"),
                thousands(d.num(&["results", "target_rate"])),
                thousands(d.num(&["results", "achieved_rate"])),
                thousands(d.num(&["results", "ok"])),
                crate::doc::validate(&d.v).unwrap_or(0),
                if kinds.is_empty() {
                    "–".into()
                } else {
                    kinds.join(", ")
                },
                ms(d.num(&["results", "latency_us", "p50"])),
                ms(d.num(&["results", "latency_us", "p99"])),
                ms(d.num(&["results", "latency_us", "max"])),
                thousands(d.num(&["results", "reconnects"])),
            );
        }
        md.push('\n');
    }
    let checks: Vec<&Doc> = docs
        .iter()
        .copied()
        .filter(|d| d.kind() == "check")
        .collect();
    for d in &checks {
        let _ = writeln!(
            md,
            "- Check *{}*: {} ({})",
            d.label("check"),
            match d.v["results"]["outcome"].as_str() {
                Some("passed") => "passed",
                Some("skipped") => "skipped",
                _ => "FAILED",
            },
            d.v["results"]["detail"].as_str().unwrap_or("")
        );
    }
    if !checks.is_empty() {
        md.push('\n');
    }
    let rss: Vec<&Doc> = docs.iter().copied().filter(|d| d.kind() == "rss").collect();
    for (i, d) in rss.iter().enumerate() {
        let pts: Vec<(f64, f64)> = d.v["results"]["samples"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["t_s"].as_f64().unwrap_or(0.0),
                    s["rss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                )
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let peak = pts.iter().map(|p| p.1).fold(0.0, f64::max);
        let last = pts.last().map_or(0.0, |p| p.1);
        let _ = writeln!(
            md,
            "RSS of the fleet: {} samples over {:.0} s, peak {:.1} MiB, at the end {:.1} MiB.\n",
            pts.len(),
            pts.last().map_or(0.0, |p| p.0),
            peak,
            last
        );
        let name = if i == 0 {
            format!("{tag}-rss.svg")
        } else {
            format!("{tag}-rss-{i}.svg")
        };
        charts.push((
            name.clone(),
            svg::line_chart(
                "Fleet RSS during the soak",
                "seconds",
                "MiB",
                &[("RSS".into(), pts)],
            ),
        ));
        let _ = writeln!(md, "![Fleet RSS during the soak]({svg_rel}/{name})\n");
    }
}

fn memory(md: &mut String, charts: &mut Vec<(String, String)>, docs: &[&Doc], svg_rel: &str) {
    md.push_str("## Memory per data shape (`scripts/bench-memory-shapes.sh`)\n\n");
    md.push_str(
        "One fresh server process per shape and run (a recached engine, `recached server`, \
         against one redis-server), filled with the same commands by `redis-cli --pipe` until \
         DBSIZE is the shape's key count, then sampled; median of the repeated runs. *RSS* is \
         the resident memory the OS charges the process (VmRSS in /proc/PID/status, read the \
         same way for both servers): the figure to size a machine by. *used_memory* is the \
         server's own INFO figure, and it means different things: redis-server reports the \
         bytes its allocator has handed out (size-class rounding included, fragmentation and \
         pages kept for reuse not); recached reports a logical estimate kept in O(1) per write \
         (a fixed baseline plus key bytes, value bytes and a fixed overhead per key, \
         docs/memory.md), which is what `maxmemory` is enforced against and does not see \
         allocator rounding, fragmentation, connection buffers or the process's own code and \
         tables. So RSS is comparable \
         between the servers; used_memory is comparable only with RSS of the same server. \
         *bytes/element* is (RSS − the same server's RSS when empty) ÷ the items stored \
         (keys, fields, members or list elements).\n\n",
    );
    run_line(md, docs);
    // Shapes in the order the script lists them (`shape_order` label), not by file name.
    let mut docs: Vec<&Doc> = docs.to_vec();
    docs.sort_by(|a, b| num_order(a.label("shape_order"), b.label("shape_order")));
    let docs = &docs[..];
    let shapes = first_seen(docs.iter().map(|d| d.label("shape")));
    let mut systems = first_seen(docs.iter().map(|d| d.label("system")));
    // recached first, the reference after it.
    systems.sort_by_key(|s| !s.starts_with("recached"));
    let reference = systems
        .iter()
        .find(|s| s.starts_with("redis"))
        .cloned()
        .unwrap_or_default();
    struct Cell {
        keys: f64,
        rss: f64,
        used: f64,
        elements: f64,
        runs: usize,
    }
    let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
    for sh in &shapes {
        for sy in &systems {
            let g: Vec<&Doc> = docs
                .iter()
                .copied()
                .filter(|d| d.label("shape") == sh && d.label("system") == sy)
                .collect();
            if g.is_empty() {
                continue;
            }
            let m = |path: &[&str]| median(g.iter().map(|d| d.num(path)).collect());
            cells.insert(
                (sh.clone(), sy.clone()),
                Cell {
                    keys: m(&["results", "keys"]),
                    rss: m(&["results", "rss_bytes"]),
                    used: m(&["results", "used_memory"]),
                    elements: m(&["params", "elements"]),
                    runs: g.len(),
                },
            );
        }
    }
    let mib = |b: f64| format!("{:.1}", b / 1048576.0);
    md.push_str(
        "| shape | holds | server | keys (DBSIZE) | RSS MiB | used_memory MiB | RSS ÷ used_memory | RSS vs redis-server | bytes/element | runs |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for sh in &shapes {
        let holds = docs
            .iter()
            .find(|d| d.label("shape") == sh)
            .and_then(|d| d.v["params"]["describe"].as_str())
            .unwrap_or("");
        for sy in &systems {
            let Some(c) = cells.get(&(sh.clone(), sy.clone())) else {
                continue;
            };
            let ratio = |a: f64, b: f64| {
                if a > 0.0 && b > 0.0 {
                    format!("{:.2}×", a / b)
                } else {
                    "–".into()
                }
            };
            let vs_ref = match cells.get(&(sh.clone(), reference.clone())) {
                Some(r) if sy != &reference => ratio(c.rss, r.rss),
                _ => "–".into(),
            };
            let empty = cells
                .get(&("empty".to_string(), sy.clone()))
                .map_or(0.0, |e| e.rss);
            let per_element = if c.elements > 0.0 {
                thousands(((c.rss - empty) / c.elements).max(0.0))
            } else {
                "–".into()
            };
            let _ = writeln!(
                md,
                "| {sh} | {holds} | {sy} | {} | {} | {} | {} | {vs_ref} | {per_element} | {} |",
                thousands(c.keys),
                mib(c.rss),
                mib(c.used),
                ratio(c.rss, c.used),
                c.runs,
            );
        }
    }
    let series: Vec<(String, Vec<f64>)> = systems
        .iter()
        .map(|sy| {
            let v = shapes
                .iter()
                .map(|sh| {
                    cells
                        .get(&(sh.clone(), sy.clone()))
                        .map_or(0.0, |c| c.rss / 1048576.0)
                })
                .collect();
            (sy.clone(), v)
        })
        .collect();
    let name = "memory-shapes.svg".to_string();
    charts.push((
        name.clone(),
        svg::bar_chart(
            "RSS per data shape (median, MiB)",
            "RSS MiB",
            &shapes,
            &series,
            false,
        ),
    ));
    let _ = writeln!(md, "\n![RSS per data shape]({svg_rel}/{name})\n");
}

/// Renders the report from `docs`; charts are linked as `{svg_rel}/{name}`.
pub fn render(docs: &[Doc], svg_rel: &str) -> Rendered {
    let mut md = String::new();
    let mut charts = Vec::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str(
        "<!-- GENERATED by `recached-bench report` from bench/results/*.json. Do not edit by hand: \
         re-run the scripts below, then scripts/bench-report.sh. -->\n\n",
    );
    let cpus = first_seen(
        docs.iter()
            .map(|d| d.v["host"]["cpus"].to_string())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let kernels = first_seen(docs.iter().filter_map(|d| d.v["host"]["kernel"].as_str()));
    let _ = writeln!(
        md,
        "Generated from {} result files. Host: {} CPUs, Linux {}.\n",
        docs.len(),
        cpus.join("/"),
        if kernels.is_empty() {
            "?".into()
        } else {
            kernels.join(", ")
        }
    );
    let loads: Vec<f64> = docs
        .iter()
        .filter_map(|d| d.v["host"]["loadavg_1m"].as_f64())
        .collect();
    if !loads.is_empty() {
        let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = loads.iter().copied().fold(0.0, f64::max);
        let _ = write!(
            md,
            "1-minute load average as the results were written: {lo:.1} to {hi:.1} (a load above the CPU count means other work competed for the CPUs)."
        );
        let most_cpus = docs
            .iter()
            .filter_map(|d| d.v["host"]["cpus"].as_u64())
            .max()
            .unwrap_or(0);
        // The load average counts the benchmark's own processes too, so only a load well above
        // what one suite keeps busy is called out as outside work.
        if most_cpus > 0 && hi > 2.0 * most_cpus as f64 {
            md.push_str(
                " It reached more than twice the CPU count, so work outside the benchmark \
                 (builds, other benchmarks) ran at the same time: absolute figures from this run \
                 are noisy, and a re-run on a quiet machine will differ.",
            );
        }
        md.push_str("\n\n");
    }
    md.push_str(
        "**Caveat.** These figures come from one small machine: the load generators \
         (redis-benchmark and `recached-bench run`) share its CPUs with the servers they \
         measure, so every figure is a lower bound on what the servers can do and the ratios \
         between systems matter more than the absolute numbers. Re-run the scripts on your own \
         hardware (with `PIN=1` and separate cores for the generator where you have them).\n\n",
    );
    md.push_str(
        "Reproduce: `scripts/bench-all.sh` runs every suite below and regenerates this file \
         and docs/bench/*.svg; or run one suite (`scripts/bench-scaling.sh`, \
         `scripts/bench-systems.sh`, `scripts/bench-scenarios.sh`, `scripts/soak.sh`, \
         `scripts/bench-memory-shapes.sh`), then `scripts/bench-report.sh`. Each script writes \
         one JSON file per measurement under `bench/results/` with the binary versions, the \
         configuration and every parameter of the run; the report shows the newest run of \
         each suite.\n\n",
    );
    let runs = latest_runs(docs);
    if let Some(d) = runs.get("scaling") {
        scaling(&mut md, &mut charts, d, svg_rel);
    }
    if let Some(d) = runs.get("systems") {
        systems(&mut md, &mut charts, d, svg_rel);
    }
    if let Some(d) = runs.get("scenarios") {
        scenarios(&mut md, d);
    }
    if let Some(d) = runs.get("soak") {
        soak(&mut md, &mut charts, d, svg_rel, false);
    }
    if let Some(d) = runs.get("memcached") {
        crate::memcached::report_section(&mut md, d);
    }
    if let Some(d) = runs.get("soak-memcached") {
        soak(&mut md, &mut charts, d, svg_rel, true);
    }
    if let Some(d) = runs.get("memory") {
        memory(&mut md, &mut charts, d, svg_rel);
    }
    Rendered {
        markdown: md,
        charts,
    }
}

/// Renders `docs` into `out` and the charts into `svg_dir`.
pub fn write(docs: &[Doc], out: &Path, svg_dir: &Path) -> Result<(), String> {
    let base = out.parent().unwrap_or(Path::new(""));
    let rel = svg_dir
        .strip_prefix(base)
        .map(|p| p.to_path_buf())
        .unwrap_or_else(|_| std::path::absolute(svg_dir).unwrap_or(svg_dir.to_path_buf()));
    let rel = rel.display().to_string();
    let r = render(docs, if rel.is_empty() { "." } else { &rel });
    std::fs::create_dir_all(svg_dir).map_err(|e| format!("{}: {e}", svg_dir.display()))?;
    for (name, text) in &r.charts {
        let p = svg_dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if !base.as_os_str().is_empty() {
        std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
    }
    std::fs::write(out, &r.markdown).map_err(|e| format!("{}: {e}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
        assert_eq!(ms(101_380.0), "101.38");
        assert_eq!(change(100.0, 150.0), "+50%");
        assert_eq!(change(100.0, 97.0), "-3%");
        assert_eq!(change(0.0, 1.0), "n/a");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
