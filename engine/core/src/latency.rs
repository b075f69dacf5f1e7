//! LATENCY (redis `latency.c`, 7.0): latency events and per-command latency histograms.
//!
//! - **Events.** With `latency-monitor-threshold` (ms, 0 = off, Redis's default) set, a
//!   command that took at least that long is a sample of the event `command`, or
//!   `fast-command` for a command flagged fast. Each event keeps its largest sample and up to
//!   160 samples, one per second (the largest of that second), as Redis does. LATEST, HISTORY,
//!   RESET, DOCTOR and GRAPH read them.
//! - **Histograms.** Every command's durations are counted in power-of-two buckets of µs
//!   (INFO commandstats times them, `crate::dispatch`); LATENCY HISTOGRAM answers each
//!   command's calls and the cumulative count per bucket, in Redis's reply shape. Redis keeps
//!   an HDR histogram of ns with 2 significant digits and reports it the same way (buckets
//!   of `1024 ns × 2^i`, printed in µs), so the shapes match and the counts are coarser here.
//!
//! - **Expiry.** `expire-cycle`: one active expiry cycle over the databases, the values of
//!   the keys it expires freed inside it (redis `activeExpireCycle`; `Engine::cron`).
//!   `expire-del`: the slowest deletion of one expired key, value freed included (redis
//!   `deleteExpiredKeyAndPropagate`), by the cycle or by a command's lookup; timed only
//!   while the monitor is on, as Redis's `latencyStartMonitor` reads no clock at threshold 0.
//!
//! Not here: the other events Redis samples (`eviction-cycle`, fork, AOF…).

use std::collections::{BTreeMap, VecDeque};

use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;

/// Histogram buckets: up to 2^23 µs (8.4 s); longer calls count in the last.
pub const BUCKETS: usize = 24;
/// Samples kept per event (redis `LATENCY_TS_LEN`).
const SAMPLES: usize = 160;

/// The bucket of a duration: the smallest `i` with `d <= 2^i` µs.
#[inline]
pub fn bucket(usec: u64) -> usize {
    if usec <= 1 {
        0
    } else {
        ((64 - (usec - 1).leading_zeros()) as usize).min(BUCKETS - 1)
    }
}

#[derive(Debug, Default)]
pub struct Latency {
    /// `latency-monitor-threshold`, ms.
    pub threshold_ms: u64,
    events: BTreeMap<&'static str, Event>,
}

#[derive(Debug, Default)]
struct Event {
    /// `(unix time s, ms)`, oldest first.
    samples: VecDeque<(u64, u64)>,
    max: u64,
}

/// After a command that ran `usec` µs: a sample of `command` / `fast-command` when it reached
/// the threshold.
#[inline]
pub fn after_command(e: &mut Engine, fast: bool, usec: u64, now_us: u64) {
    if e.ks.expire_del_max_us != 0 {
        take_expire_del(e, now_us);
    }
    let t = e.latency.threshold_ms;
    if t == 0 || usec / 1000 < t {
        return;
    }
    add_sample(
        e,
        if fast { "fast-command" } else { "command" },
        usec / 1000,
        now_us,
    );
}

/// After an active expiry cycle that took `usec` µs (the values of the keys it expired are
/// freed inside it, as in Redis with `lazyfree-lazy-expire no`, its default): a sample of
/// `expire-cycle` when it reached the threshold, and of `expire-del` for its slowest key.
pub fn after_expire_cycle(e: &mut Engine, usec: u64, now_us: u64) {
    take_expire_del(e, now_us);
    let t = e.latency.threshold_ms;
    if t != 0 && usec / 1000 >= t {
        add_sample(e, "expire-cycle", usec / 1000, now_us);
    }
}

/// The slowest expired key's deletion since the last call, as an `expire-del` sample when
/// it reached the threshold.
fn take_expire_del(e: &mut Engine, now_us: u64) {
    let ms = std::mem::take(&mut e.ks.expire_del_max_us) / 1000;
    let t = e.latency.threshold_ms;
    if t != 0 && ms >= t {
        add_sample(e, "expire-del", ms, now_us);
    }
}

/// Deletions of expired keys are timed only while the monitor is on (and the host has a
/// clock): after `latency-monitor-threshold` changes, and each tick (the host installs its
/// clock after the engine is made).
pub fn sync_clock(e: &mut Engine) {
    e.ks.expire_del_clock = match e.latency.threshold_ms {
        0 => None,
        _ => e.host.clock,
    };
}

/// A command's latency histogram for INFO latencystats: ns, 1 ns to 1 s, 2 significant
/// digits (redis `LATENCY_HISTOGRAM_MIN_VALUE`, `…_MAX_VALUE`, `…_PRECISION`), so its
/// percentiles are the values redis-server reports for the same durations.
pub type Hdr = hdrhistogram::Histogram<u64>;

const HDR_MAX_NS: u64 = 1_000_000_000;

/// Records `calls` calls of `usec` each into a command's histogram, made on first use;
/// durations outside the range are clamped to it (redis `updateCommandLatencyHistogram`).
pub fn record(hdr: &mut Option<Box<Hdr>>, usec: u64, calls: u64) {
    let h = hdr.get_or_insert_with(|| {
        Box::new(Hdr::new_with_bounds(1, HDR_MAX_NS, 2).expect("valid HDR bounds"))
    });
    h.saturating_record_n(usec.saturating_mul(1000).clamp(1, HDR_MAX_NS), calls);
}

/// INFO latencystats lines: `latency_percentiles_usec_<command>:p50=1.003,p99=…` per tracked
/// command, µs with 3 decimals (redis `fillPercentileDistributionLatencies`).
pub fn write_latencystats(e: &Engine, s: &mut String) {
    use std::fmt::Write as _;
    let ps = &e.config.latency_tracking_percentiles;
    for (name, h) in e.cmdstats.latency_histograms() {
        let _ = write!(
            s,
            "latency_percentiles_usec_{}:",
            name.replace(['#', ':', '\n', '\r'], "_")
        );
        for (i, p) in ps.iter().enumerate() {
            let sep = if i + 1 < ps.len() { "," } else { "" };
            let v = value_at_percentile(&h, *p) as f64 / 1000.0;
            let _ = write!(s, "p{}={v:.3}{sep}", trim_double(*p));
        }
        s.push_str("\r\n");
    }
}

/// hdr_histogram's `hdr_value_at_percentile` (the C library Redis bundles): the highest value
/// equivalent to the one where the count reaches `percentile` % of the total (rounded half
/// up, at least 1).
fn value_at_percentile(h: &Hdr, percentile: f64) -> u64 {
    let total = h.len();
    let p = percentile.min(100.0);
    let want = (((p / 100.0) * total as f64) + 0.5) as u64;
    let want = want.max(1);
    let mut seen = 0;
    for v in h.iter_recorded() {
        seen += v.count_since_last_iteration();
        if seen >= want {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    0
}

/// `%f` then redis `trimDoubleString`: `50` → "50", `99.9` → "99.9".
fn trim_double(p: f64) -> String {
    let s = format!("{p:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// CONFIG GET `latency-tracking-info-percentiles`: space-separated, trimmed.
pub fn format_percentiles(ps: &[f64]) -> String {
    ps.iter()
        .map(|p| trim_double(*p))
        .collect::<Vec<_>>()
        .join(" ")
}

/// CONFIG SET `latency-tracking-info-percentiles`: numbers in 0..=100 separated by spaces
/// (`""`: none), with redis's texts (`setConfigLatencyTrackingInfoPercentilesOutputOption`).
pub fn parse_percentiles(v: &[u8]) -> Result<Vec<f64>, &'static str> {
    let mut out = Vec::new();
    for w in v.split(|b| *b == b' ').filter(|w| !w.is_empty()) {
        // redis `string2d` (strtod over the whole argument), as a score is parsed.
        let p = crate::types::zset::score::parse_score(w)
            .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&p) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
            );
        }
        out.push(p);
    }
    Ok(out)
}

/// redis `latencyAddSample`.
fn add_sample(e: &mut Engine, event: &'static str, ms: u64, now_us: u64) {
    let now = now_us / 1_000_000;
    let ev = e.latency.events.entry(event).or_default();
    ev.max = ev.max.max(ms);
    match ev.samples.back_mut() {
        Some(last) if last.0 == now => last.1 = last.1.max(ms),
        _ => {
            ev.samples.push_back((now, ms));
            if ev.samples.len() > SAMPLES {
                ev.samples.pop_front();
            }
        }
    }
}

/// LATENCY LATEST: `[event, time, latest ms, max ms]` per event.
pub fn latency_latest(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut w = c.w();
    w.array(e.latency.events.len());
    for (name, ev) in &e.latency.events {
        let (t, ms) = ev.samples.back().copied().unwrap_or((0, 0));
        w.array(4);
        w.bulk(name.as_bytes());
        w.integer(t as i64);
        w.integer(ms as i64);
        w.integer(ev.max as i64);
    }
    Ok(())
}

/// LATENCY HISTORY event: `[time, ms]` per sample, oldest first (empty for an unknown event).
pub fn latency_history(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let name = String::from_utf8_lossy(c.argv[2]).into_owned();
    let samples: Vec<(u64, u64)> = e
        .latency
        .events
        .get(name.as_str())
        .map(|ev| ev.samples.iter().copied().collect())
        .unwrap_or_default();
    let mut w = c.w();
    w.array(samples.len());
    for (t, ms) in samples {
        w.array(2);
        w.integer(t as i64);
        w.integer(ms as i64);
    }
    Ok(())
}

/// LATENCY RESET [event …]: how many events were reset (all with no argument).
pub fn latency_reset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = if c.argv.len() == 2 {
        let n = e.latency.events.len();
        e.latency.events.clear();
        n
    } else {
        c.argv[2..]
            .iter()
            .filter(|a| {
                let name = String::from_utf8_lossy(a);
                e.latency.events.remove(name.as_ref()).is_some()
            })
            .count()
    };
    c.w().integer(n as i64);
    Ok(())
}

/// LATENCY GRAPH event: Redis's error for an event without samples; else a short text of
/// its samples (Redis draws an ASCII chart; the samples are the same).
pub fn latency_graph(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let name = String::from_utf8_lossy(c.argv[2]).into_owned();
    let Some(ev) = e.latency.events.get(name.as_str()) else {
        return Err(CmdError::Other(format!(
            "ERR No samples available for event '{}'",
            crate::error::c_str_lossy(c.argv[2], 128)
        )));
    };
    let mut text = format!(
        "{name} - high {} ms, low {} ms (all time high {} ms)\n",
        ev.samples.iter().map(|s| s.1).max().unwrap_or(0),
        ev.samples.iter().map(|s| s.1).min().unwrap_or(0),
        ev.max
    );
    text.push_str(&"-".repeat(80));
    text.push('\n');
    for (t, ms) in &ev.samples {
        text.push_str(&format!("{t} {ms} ms\n"));
    }
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// LATENCY DOCTOR: Redis's texts when monitoring is off or nothing was seen; else a summary
/// per event.
pub fn latency_doctor(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let text = if e.latency.events.is_empty() && e.latency.threshold_ms == 0 {
        "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".to_string()
    } else if e.latency.events.is_empty() {
        "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep tonight.\n".to_string()
    } else {
        let mut t = String::from(
            "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n",
        );
        for (i, (name, ev)) in e.latency.events.iter().enumerate() {
            let n = ev.samples.len().max(1) as u64;
            let avg = ev.samples.iter().map(|s| s.1).sum::<u64>() / n;
            t.push_str(&format!(
                "{}. {name}: {} latency spikes (average {avg}ms, mean deviation 0ms, period 0 sec). Worst all time event {}ms.\n",
                i + 1,
                ev.samples.len(),
                ev.max
            ));
        }
        t.push_str("\nI have a few advices for you:\n\n- Check your system for slow commands (SLOWLOG GET) and the latency of the commands involved.\n");
        t
    };
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// LATENCY HISTOGRAM [command …]: per command that ran (all, or those named; a container
/// names its subcommands; unknown names are skipped), `{calls, histogram_usec: {µs:
/// cumulative count}}` for the buckets where the count grows.
pub fn latency_histogram(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let all = e.cmdstats.histograms();
    let wanted = |name: &str| {
        c.argv.len() == 2
            || c.argv[2..].iter().any(|a| {
                let a = String::from_utf8_lossy(a).to_ascii_lowercase();
                name == a || name.strip_prefix(&a).is_some_and(|r| r.starts_with('|'))
            })
    };
    let rows: Vec<_> = all.iter().filter(|r| wanted(r.0)).collect();
    let mut w = c.w();
    w.map(rows.len());
    for (name, calls, hist) in rows {
        w.bulk(name.as_bytes());
        w.map(2);
        w.bulk(b"calls");
        w.integer(*calls as i64);
        w.bulk(b"histogram_usec");
        let points: Vec<(u64, u64)> = {
            let mut cum = 0u64;
            let mut v = Vec::new();
            for (i, &n) in hist.iter().enumerate() {
                if n > 0 {
                    cum += u64::from(n);
                    v.push((1u64 << i, cum));
                }
            }
            v
        };
        w.map(points.len());
        for (us, n) in points {
            w.integer(us as i64);
            w.integer(n as i64);
        }
    }
    Ok(())
}

pub fn latency_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    const HELP: &[&str] = &[
        "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return a human readable latency analysis report.",
        "GRAPH <event>",
        "    Return an ASCII latency graph for the <event> class.",
        "HISTORY <event>",
        "    Return time-latency samples for the <event> class.",
        "LATEST",
        "    Return the latest latency samples for all events.",
        "RESET [<event> ...]",
        "    Reset latency data of one or more <event> classes.",
        "    (default: reset all data for all event classes)",
        "HISTOGRAM [COMMAND ...]",
        "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
        "    If no commands are specified then all histograms are replied.",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(HELP.len());
    for line in HELP {
        w.simple(line.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Client, Config, Engine};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock that moves 5 ms at every read: whatever is timed takes at least 5 ms.
    fn slow_clock() -> u64 {
        static NOW: AtomicU64 = AtomicU64::new(1_767_225_600_000_000);
        NOW.fetch_add(5_000, Ordering::Relaxed)
    }

    fn run(e: &mut Engine, now_us: u64, args: &[&str]) -> String {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        e.exec(&mut Client::default(), &argv, now_us, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn expiry_records_expire_cycle_and_expire_del() {
        let t0 = 1_767_225_600_000_000;
        let mut e = Engine::new(Config::default());
        e.host.clock = Some(slow_clock);
        run(
            &mut e,
            t0,
            &["CONFIG", "SET", "latency-monitor-threshold", "1"],
        );
        run(&mut e, t0, &["SET", "k", "v", "PX", "10"]);
        run(&mut e, t0, &["SET", "lazy", "v", "PX", "10"]);
        e.cron(t0 + 20_000);
        let latest = run(&mut e, t0 + 20_000, &["LATENCY", "LATEST"]);
        assert!(latest.contains("expire-cycle"), "{latest}");
        assert!(latest.contains("expire-del"), "{latest}");
        // Off: nothing is timed.
        run(
            &mut e,
            t0,
            &["CONFIG", "SET", "latency-monitor-threshold", "0"],
        );
        assert!(e.ks.expire_del_clock.is_none());
    }
}
