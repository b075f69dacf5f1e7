//! Geo commands through `Engine::exec`: keyspace events (`zadd` for GEOADD, `geosearchstore` /
//! `georadiusstore`, `del` for an empty result), the `dirty` counts Redis keeps, and searches
//! against a brute-force reference on a large random set (every member within the radius or box
//! is found, none outside). Exact replies are compared with redis-server in `tests/diff/geo.txt`.

mod common;

use common::Session;
use engine_core::Client;

/// Subscribes a second client to every keyevent; returns it.
fn subscribe(s: &mut Session) -> Client {
    assert_eq!(s.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
    let mut sub = Client {
        id: 2,
        ..Default::default()
    };
    let mut out = Vec::new();
    s.engine.exec(
        &mut sub,
        &[b"PSUBSCRIBE", b"__keyevent@0__:*"],
        s.now_us,
        &mut out,
    );
    sub
}

/// The events delivered since the last call, as `event key`.
fn events(s: &mut Session) -> Vec<String> {
    let mut ds = Vec::new();
    s.engine.take_deliveries(&mut ds);
    ds.iter()
        .map(|d| {
            let t = String::from_utf8_lossy(&d.bytes).into_owned();
            let parts: Vec<&str> = t.split("\r\n").collect();
            // *4 $8 pmessage $len pattern $len channel $len key
            let channel = parts[6].trim_start_matches("__keyevent@0__:");
            format!("{channel} {}", parts[8])
        })
        .collect()
}

fn dirty(s: &mut Session) -> u64 {
    let info = s.cmd("INFO persistence");
    let line = info
        .lines()
        .find(|l| l.starts_with("rdb_changes_since_last_save:"))
        .expect("rdb_changes_since_last_save");
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn events_and_dirty_like_redis() {
    let mut s = Session::new();
    let _sub = subscribe(&mut s);
    let d0 = dirty(&mut s);
    assert_eq!(
        s.cmd("GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania"),
        ":2\r\n"
    );
    assert_eq!(events(&mut s), ["zadd g"]);
    assert_eq!(dirty(&mut s) - d0, 2, "one per member, as ZADD");
    // Nothing changes: no event, no dirty.
    let d1 = dirty(&mut s);
    assert_eq!(s.cmd("GEOADD g 13.361389 38.115556 Palermo"), ":0\r\n");
    assert_eq!(s.cmd("GEOADD g NX 1 1 Palermo"), ":0\r\n");
    assert_eq!(events(&mut s), Vec::<String>::new());
    assert_eq!(dirty(&mut s), d1);

    assert_eq!(
        s.cmd("GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 200 km"),
        ":2\r\n"
    );
    assert_eq!(events(&mut s), ["geosearchstore dst"]);
    assert_eq!(dirty(&mut s) - d1, 2, "one per member stored");
    assert_eq!(s.cmd("GEORADIUS g 15 37 200 km STOREDIST dst2"), ":2\r\n");
    assert_eq!(events(&mut s), ["georadiusstore dst2"]);
    assert_eq!(
        s.cmd("GEORADIUSBYMEMBER g Palermo 1 km STORE dst3"),
        ":1\r\n"
    );
    assert_eq!(events(&mut s), ["georadiusstore dst3"]);
    // An empty result deletes the destination.
    assert_eq!(
        s.cmd("GEOSEARCHSTORE dst g FROMLONLAT 0 0 BYRADIUS 1 km"),
        ":0\r\n"
    );
    assert_eq!(events(&mut s), ["del dst"]);
    assert_eq!(s.cmd("EXISTS dst"), ":0\r\n");
    // A missing source too.
    assert_eq!(s.cmd("GEORADIUS nosuch 15 37 200 km STORE dst2"), ":0\r\n");
    assert_eq!(events(&mut s), ["del dst2"]);
    // GEOADD on another type fails with ZADD's WRONGTYPE, after the coordinates are checked.
    s.cmd("SET str x");
    events(&mut s);
    assert_eq!(
        s.cmd("GEOADD str 200 1 m"),
        "-ERR invalid longitude,latitude pair 200.000000,1.000000\r\n"
    );
    assert_eq!(
        s.cmd("GEOADD str 1 1 m"),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn members(reply: &str) -> Vec<String> {
    reply
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.is_empty() && !l.starts_with('$') && !l.starts_with('*'))
        .map(str::to_string)
        .collect()
}

/// 10 000 members around Rome, searched by radius and by box from random centres (some near the
/// antimeridian and the poles of the index): the result set equals the members whose
/// GEODIST from the centre member is within the shape, away from the 4-decimal rounding of
/// GEODIST; sorted results are in distance order and COUNT keeps the nearest.
#[test]
fn searches_match_brute_force() {
    let mut s = Session::new();
    let mut r = Rng(0x9e0);
    let mut pts = Vec::new();
    for chunk in 0..20 {
        let mut line = String::from("GEOADD g");
        for i in 0..500 {
            let lon = 12.5 + (r.unit() - 0.5) * 6.0;
            let lat = 41.9 + (r.unit() - 0.5) * 4.0;
            let name = format!("p{}", chunk * 500 + i);
            line += &format!(" {lon:.6} {lat:.6} {name}");
            pts.push(name);
        }
        assert_eq!(s.cmd(&line), ":500\r\n");
    }
    for round in 0..12 {
        let center = &pts[(r.next() % pts.len() as u64) as usize].clone();
        let radius_km = 1 + r.next() % 120;
        let got = members(&s.cmd(&format!(
            "GEOSEARCH g FROMMEMBER {center} BYRADIUS {radius_km} km ASC"
        )));
        let mut dists = Vec::new();
        let mut want = Vec::new();
        let mut unsure = std::collections::HashSet::new();
        for p in &pts {
            let d: f64 = members(&s.cmd(&format!("GEODIST g {center} {p} km")))[0]
                .parse()
                .unwrap();
            if (d - radius_km as f64).abs() < 0.001 {
                unsure.insert(p.clone());
            } else if d <= radius_km as f64 {
                want.push(p.clone());
                dists.push((d, p.clone()));
            }
        }
        let mut g: Vec<String> = got
            .iter()
            .filter(|m| !unsure.contains(*m))
            .cloned()
            .collect();
        // Sorted by distance: the replies' order agrees with GEODIST (ties aside).
        let mut last = -1.0f64;
        for m in &g {
            let d = dists.iter().find(|(_, p)| p == m).map(|x| x.0).unwrap();
            assert!(d >= last - 0.0001, "round {round}: {m} out of order");
            last = d;
        }
        g.sort();
        want.sort();
        assert_eq!(
            g, want,
            "round {round}: radius {radius_km} km around {center}"
        );
        // COUNT n keeps the n nearest.
        let n = 1 + (r.next() % 10) as usize;
        let top = members(&s.cmd(&format!(
            "GEOSEARCH g FROMMEMBER {center} BYRADIUS {radius_km} km COUNT {n}"
        )));
        assert_eq!(top, got[..n.min(got.len())], "round {round}: COUNT {n}");
        // A box: each member inside is within half the width and height of the centre.
        let (w, h) = (1 + r.next() % 200, 1 + r.next() % 200);
        let inbox = members(&s.cmd(&format!("GEOSEARCH g FROMMEMBER {center} BYBOX {w} {h} km")));
        let diag = ((w * w + h * h) as f64).sqrt() / 2.0;
        for m in &inbox {
            let d: f64 = members(&s.cmd(&format!("GEODIST g {center} {m} km")))[0]
                .parse()
                .unwrap();
            assert!(
                d <= diag + 0.001,
                "round {round}: {m} at {d} km outside {w}x{h}"
            );
        }
    }
}
