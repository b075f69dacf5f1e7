//! Regression tests, one per bug found (sled style): each `bug_NNN_…` replays the smallest
//! input that showed the bug and carries a postmortem — symptom, root cause, fix.

use engine_core::{Client, Config, Engine};

const T0: u64 = 1_767_225_600_000_000;

struct Session {
    engine: Engine,
    client: Client,
}

impl Session {
    fn new() -> Session {
        Session {
            engine: Engine::new(Config {
                hash_seed: 42,
                ..Config::default()
            }),
            client: Client {
                id: 1,
                ..Client::default()
            },
        }
    }

    fn cmd(&mut self, line: &str) -> String {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        self.engine.exec(&mut self.client, &argv, T0, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[test]
fn bug_001_zremrangebylex_mixed_scores() {
    let mut s = Session::new();
    assert_eq!(s.cmd("ZADD z 32.8 m2 39.4 m1 77.4 m7"), ":3\r\n");
    assert_eq!(s.cmd("ZREMRANGEBYLEX z [m2 [m5"), ":2\r\n");
}
