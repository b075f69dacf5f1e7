//! The engine-level test harness shared by the tests in engine/core/tests: one engine and one
//! client at a settable clock (`now_us`, starting at [`T0`]), commands written as
//! space-separated lines or as argument lists, replies as RESP text or raw bytes.
#![allow(dead_code)]

use engine_core::{Client, Config, Engine, Flow};

/// 2026-01-01T00:00:00Z in µs: a fixed, realistic "now".
pub const T0: u64 = 1_767_225_600_000_000;

pub struct Session {
    pub engine: Engine,
    pub client: Client,
    pub now_us: u64,
}

impl Session {
    /// Keyspace hash seed 42 (replies that depend on hash order repeat run to run).
    pub fn new() -> Session {
        Session::with_seed(42)
    }

    pub fn with_seed(hash_seed: u64) -> Session {
        Session {
            engine: Engine::new(Config {
                hash_seed,
                ..Config::default()
            }),
            client: Client {
                id: 1,
                created_us: T0,
                ..Client::default()
            },
            now_us: T0,
        }
    }

    /// One command as arguments; the raw reply bytes and the flow.
    pub fn raw(&mut self, argv: &[&[u8]]) -> (Vec<u8>, Flow) {
        let mut out = Vec::new();
        let flow = self
            .engine
            .exec(&mut self.client, argv, self.now_us, &mut out);
        (out, flow)
    }

    /// One command as string arguments (they may contain spaces); the reply as text.
    pub fn argv(&mut self, argv: &[&str]) -> String {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(&self.raw(&argv).0).into_owned()
    }

    /// One command given as space-separated words; the reply as text.
    pub fn cmd(&mut self, line: &str) -> String {
        let argv: Vec<&str> = line.split(' ').collect();
        self.argv(&argv)
    }

    pub fn advance_ms(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }
}
