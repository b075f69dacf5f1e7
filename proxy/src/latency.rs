//! `LATENCY` through the proxy: every instance's latency monitor and command histograms,
//! merged into the one reply a single Redis would give (issue 14: "SLOWLOG/LATENCY fanned
//! out"). The instances answer on the RESP2 links; the merges read those shapes:
//!
//! | subcommand | instances | merged |
//! |---|---|---|
//! | `LATEST` | `[[event, time, latest, max], …]` | one entry per event: the most recent sample's time and latency, the largest max |
//! | `HISTORY event` | `[[time, latency], …]` | every sample, by time, the newest 160 (Redis's `LATENCY_TS_LEN`) |
//! | `RESET [event …]` | `:n` | summed (series reset, counted per instance) |
//! | `HISTOGRAM [cmd …]` | `[cmd, [calls, n, histogram_usec, [µs, cumulative, …]], …]` | per command: calls summed, the cumulative counts of every bucket bound added up (RESP3: maps) |
//!
//! `DOCTOR`, `GRAPH` and `HELP` are answered by one instance.

use crate::split::{
    aggregate_elems, array_elems, bulk_body, integer, push_array_header, push_bulk,
};

/// An array's elements, or a RESP3 map's keys and values in turn (a RESP3 client's
/// instances answer HISTOGRAM with maps).
fn elems(frame: &[u8]) -> Option<Vec<&[u8]>> {
    aggregate_elems(frame, true)
}

/// Redis keeps this many samples per event (latency.h, `LATENCY_TS_LEN`).
const HISTORY_LEN: usize = 160;

fn push_int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `LATENCY LATEST` over instances. `None`: a reply of another shape.
pub fn merge_latest(replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(entries) = entries(replies) else {
        return false;
    };
    // event → (time, latest, max), in first-seen order.
    let mut events: Vec<(Vec<u8>, i64, i64, i64)> = Vec::new();
    for f in entries {
        let (Some(name), Some(time), Some(latest), Some(max)) = (
            f.first().and_then(|x| bulk_body(x)),
            f.get(1).and_then(|x| integer(x)),
            f.get(2).and_then(|x| integer(x)),
            f.get(3).and_then(|x| integer(x)),
        ) else {
            return false;
        };
        match events.iter_mut().find(|(n, ..)| n.as_slice() == name) {
            Some(ev) => {
                if time > ev.1 {
                    ev.1 = time;
                    ev.2 = latest;
                }
                ev.3 = ev.3.max(max);
            }
            None => events.push((name.to_vec(), time, latest, max)),
        }
    }
    push_array_header(out, events.len());
    for (name, time, latest, max) in events {
        push_array_header(out, 4);
        push_bulk(out, &name);
        push_int(out, time);
        push_int(out, latest);
        push_int(out, max);
    }
    true
}

/// Every instance's entries (arrays of arrays), each entry's fields; `None` for another shape.
fn entries<'a>(replies: &[&'a [u8]]) -> Option<Vec<Vec<&'a [u8]>>> {
    let mut all = Vec::new();
    for r in replies {
        for e in array_elems(r)? {
            all.push(array_elems(e)?);
        }
    }
    Some(all)
}

/// `LATENCY HISTORY event` over instances.
pub fn merge_history(replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(entries) = entries(replies) else {
        return false;
    };
    let mut samples: Vec<(i64, i64)> = Vec::with_capacity(entries.len());
    for f in entries {
        let (Some(time), Some(latency)) = (
            f.first().and_then(|x| integer(x)),
            f.get(1).and_then(|x| integer(x)),
        ) else {
            return false;
        };
        samples.push((time, latency));
    }
    samples.sort_by_key(|s| s.0);
    let skip = samples.len().saturating_sub(HISTORY_LEN);
    push_array_header(out, samples.len() - skip);
    for (time, latency) in &samples[skip..] {
        push_array_header(out, 2);
        push_int(out, *time);
        push_int(out, *latency);
    }
    true
}

/// One command's histogram: calls, and (bucket bound in µs, cumulative count) by bound.
type Histogram = (i64, Vec<(i64, i64)>);

/// `LATENCY HISTOGRAM [cmd …]` over instances, in the client's protocol (RESP3: maps).
pub fn merge_histogram(replies: &[&[u8]], resp3: bool, out: &mut Vec<u8>) -> bool {
    let mut commands: Vec<(Vec<u8>, Vec<Histogram>)> = Vec::new();
    for r in replies {
        let Some(flat) = elems(r) else {
            return false;
        };
        for pair in flat.chunks(2) {
            let [name, body] = pair else {
                return false;
            };
            let (Some(name), Some(h)) = (bulk_body(name), histogram(body)) else {
                return false;
            };
            match commands.iter_mut().find(|(n, _)| n.as_slice() == name) {
                Some((_, all)) => all.push(h),
                None => commands.push((name.to_vec(), vec![h])),
            }
        }
    }
    let map = |out: &mut Vec<u8>, n: usize| {
        if resp3 {
            out.push(b'%');
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        } else {
            push_array_header(out, n * 2);
        }
    };
    map(out, commands.len());
    for (name, parts) in commands {
        let calls: i64 = parts.iter().map(|h| h.0).sum();
        let buckets = add_cumulative(&parts);
        push_bulk(out, &name);
        map(out, 2);
        push_bulk(out, b"calls");
        push_int(out, calls);
        push_bulk(out, b"histogram_usec");
        map(out, buckets.len());
        for (bound, count) in buckets {
            push_int(out, bound);
            push_int(out, count);
        }
    }
    true
}

/// `[calls, n, histogram_usec, [µs, cumulative, …]]`.
fn histogram(frame: &[u8]) -> Option<Histogram> {
    let f = elems(frame)?;
    if f.len() != 4 {
        return None;
    }
    let calls = integer(f[1])?;
    let flat = elems(f[3])?;
    let mut buckets = Vec::with_capacity(flat.len() / 2);
    for pair in flat.chunks(2) {
        let [bound, count] = pair else {
            return None;
        };
        buckets.push((integer(bound)?, integer(count)?));
    }
    Some((calls, buckets))
}

/// The sum of cumulative distributions given at different bounds: at every bound any of them
/// has, each contributes its count at the largest bound not above it.
fn add_cumulative(parts: &[Histogram]) -> Vec<(i64, i64)> {
    let mut bounds: Vec<i64> = parts.iter().flat_map(|h| h.1.iter().map(|b| b.0)).collect();
    bounds.sort_unstable();
    bounds.dedup();
    bounds
        .into_iter()
        .map(|x| {
            let total = parts
                .iter()
                .map(|h| {
                    h.1.iter()
                        .take_while(|b| b.0 <= x)
                        .last()
                        .map_or(0, |b| b.1)
                })
                .sum();
            (x, total)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: impl Fn(&[&[u8]], &mut Vec<u8>) -> bool, replies: &[&[u8]]) -> String {
        let mut out = Vec::new();
        assert!(f(replies, &mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn latest_keeps_one_entry_per_event() {
        let a: &[u8] = b"*1\r\n*4\r\n$7\r\ncommand\r\n:100\r\n:5\r\n:9\r\n";
        let b: &[u8] = b"*2\r\n*4\r\n$7\r\ncommand\r\n:200\r\n:3\r\n:4\r\n*4\r\n$4\r\nfork\r\n:150\r\n:7\r\n:7\r\n";
        assert_eq!(
            run(merge_latest, &[a, b]),
            "*2\r\n*4\r\n$7\r\ncommand\r\n:200\r\n:3\r\n:9\r\n*4\r\n$4\r\nfork\r\n:150\r\n:7\r\n:7\r\n"
        );
        assert_eq!(run(merge_latest, &[b"*0\r\n", b"*0\r\n"]), "*0\r\n");
    }

    #[test]
    fn history_is_by_time() {
        let a: &[u8] = b"*2\r\n*2\r\n:10\r\n:1\r\n*2\r\n:30\r\n:3\r\n";
        let b: &[u8] = b"*1\r\n*2\r\n:20\r\n:2\r\n";
        assert_eq!(
            run(merge_history, &[a, b]),
            "*3\r\n*2\r\n:10\r\n:1\r\n*2\r\n:20\r\n:2\r\n*2\r\n:30\r\n:3\r\n"
        );
    }

    #[test]
    fn histograms_add_up() {
        // Engine A: 2 SETs at 2 µs and 8 µs; engine B: 1 SET at 4 µs, 1 GET at 1 µs.
        let a: &[u8] = b"*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*4\r\n:2\r\n:1\r\n:8\r\n:2\r\n";
        let b: &[u8] = b"*4\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:1\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:1\r\n:1\r\n";
        let mut out = Vec::new();
        assert!(merge_histogram(&[a, b], false, &mut out));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "*4\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n\
             *6\r\n:2\r\n:1\r\n:4\r\n:2\r\n:8\r\n:3\r\n\
             $3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:1\r\n:1\r\n"
        );
        let mut out = Vec::new();
        assert!(merge_histogram(&[b"*0\r\n", b"*0\r\n"], true, &mut out));
        assert_eq!(out, b"%0\r\n");
        // RESP3 instances answer maps.
        let c: &[u8] = b"%1\r\n$3\r\nget\r\n%2\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n%1\r\n:1\r\n:2\r\n";
        let mut out = Vec::new();
        assert!(merge_histogram(&[c, c], true, &mut out));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "%1\r\n$3\r\nget\r\n%2\r\n$5\r\ncalls\r\n:4\r\n$14\r\nhistogram_usec\r\n%1\r\n:1\r\n:4\r\n"
        );
    }

    #[test]
    fn other_shapes_are_refused() {
        let mut out = Vec::new();
        assert!(!merge_latest(&[b"+OK\r\n"], &mut out));
        assert!(!merge_history(&[b"*1\r\n:1\r\n"], &mut out));
        assert!(!merge_histogram(&[b"*1\r\n$3\r\nset\r\n"], false, &mut out));
    }
}
