//! The load generator's two promises, tested against fixed seeds and a tiny in-test server:
//! its arrivals are a Poisson process (exponential inter-arrival times), and latency is taken
//! from the intended start, so a server stall shows up in every request scheduled during it
//! (no coordinated omission).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use recached_bench::loadgen::{self, LoadParams};
use recached_bench::origin::parse_request;
use recached_bench::rng::Rng;
use recached_bench::schedule::Schedule;

/// 100,000 gaps at 1,000/s from a fixed seed: mean and variance of Exp(λ) are 1/λ and 1/λ²,
/// and the Kolmogorov–Smirnov distance to the exponential CDF is below the 1% critical value
/// 1.63/√n (the seed is fixed, so this either always passes or always fails).
#[test]
fn inter_arrival_times_are_exponential() {
    const N: usize = 100_000;
    let rate = 1000.0;
    let times: Vec<u64> = Schedule::new(Rng::new(42), rate).take(N + 1).collect();
    let mut gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e9)
        .collect();
    assert!(gaps.iter().all(|g| *g >= 0.0));
    let mean = gaps.iter().sum::<f64>() / N as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (N - 1) as f64;
    let (m0, v0) = (1.0 / rate, 1.0 / (rate * rate));
    assert!((mean - m0).abs() / m0 < 0.01, "mean {mean} vs {m0}");
    assert!((var - v0).abs() / v0 < 0.03, "variance {var} vs {v0}");
    gaps.sort_by(|a, b| a.total_cmp(b));
    let d = gaps
        .iter()
        .enumerate()
        .map(|(i, &g)| {
            let f = 1.0 - (-rate * g).exp();
            (f - i as f64 / N as f64)
                .abs()
                .max(((i + 1) as f64 / N as f64 - f).abs())
        })
        .fold(0.0, f64::max);
    let critical = 1.63 / (N as f64).sqrt();
    assert!(d < critical, "KS distance {d} ≥ {critical}");
    // Same seed, same schedule; another seed, another one.
    let again: Vec<u64> = Schedule::new(Rng::new(42), rate).take(N + 1).collect();
    assert_eq!(times, again);
    assert_ne!(
        times[..10],
        Schedule::new(Rng::new(43), rate)
            .take(10)
            .collect::<Vec<_>>()[..]
    );
}

/// A server that answers `+OK` at once, except that 300 ms after the first request it stalls
/// once for 100 ms. Returns its port.
fn stalling_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut first: Option<Instant> = None;
        let mut stalled = false;
        loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            while let Ok(Some((_, used))) = parse_request(&buf) {
                buf.drain(..used);
                let t0 = *first.get_or_insert_with(Instant::now);
                if !stalled && t0.elapsed() >= Duration::from_millis(300) {
                    stalled = true;
                    std::thread::sleep(Duration::from_millis(100));
                }
                if s.write_all(b"+OK\r\n").is_err() {
                    return;
                }
            }
        }
    });
    port
}

#[test]
fn a_server_stall_is_charged_to_every_request_scheduled_during_it() {
    let port = stalling_server();
    let params = LoadParams {
        target: format!("127.0.0.1:{port}"),
        rate: 2000.0,
        duration: 1.0,
        warmup: 0.0,
        connections: 1,
        pipeline: 1,
        mix: "get:1".into(),
        seed: 7,
        ..LoadParams::default()
    };
    let o = loadgen::run(&params).unwrap();
    assert_eq!(o.error_count(), 0, "{:?}", o.errors);
    assert_eq!(o.ok, o.scheduled);
    // About 2000 arrivals in the measured second.
    assert!((1700..=2300).contains(&o.ok), "ok {}", o.ok);
    // The stalled request itself waited the full 100 ms.
    assert!(o.latency.max() >= 95_000, "max {}", o.latency.max());
    // Arrivals in the first half of the stall (≈ 100 at 2000/s) all waited ≥ 50 ms.
    let slow = o.latency.count_between(50_000, 60_000_000);
    assert!(slow >= 50, "only {slow} requests ≥ 50 ms");
    // Timed from when they were written (the closed-loop view), only the stalled one was slow.
    let slow_service = o.service.count_between(50_000, 60_000_000);
    assert!(slow_service <= 2, "{slow_service} slow by service time");
}

#[test]
fn bad_parameters_are_refused() {
    let base = LoadParams {
        target: "127.0.0.1:1".into(),
        ..LoadParams::default()
    };
    for p in [
        LoadParams {
            rate: 0.0,
            ..base.clone()
        },
        LoadParams {
            mix: "del:1".into(),
            ..base.clone()
        },
        LoadParams {
            distribution: "pareto".into(),
            ..base.clone()
        },
        LoadParams {
            mode: "cache-aside".into(),
            ..base.clone()
        },
        LoadParams {
            connections: 0,
            ..base.clone()
        },
    ] {
        assert!(loadgen::run(&p).is_err(), "{p:?}");
    }
    assert_eq!(loadgen::key_slot(b"foo"), 12182);
    assert_eq!(loadgen::key_slot(b"{user1000}.following"), 3443);
}
