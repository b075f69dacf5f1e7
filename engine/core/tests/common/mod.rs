//! The engine-level test harness shared by the tests in engine/core/tests: one engine and one
//! client at a settable clock (`now_us`, starting at [`T0`]), commands written as
//! space-separated lines or as argument lists, replies as RESP text or raw bytes.
#![allow(dead_code)]

use engine_core::{Client, Config, Delivery, Engine, Flow};

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

/// One engine and `n` clients (ids 1..=n) at a settable clock: the blocking-command tests'
/// harness (lists, sorted sets, streams).
pub struct World {
    pub engine: Engine,
    pub clients: Vec<Client>,
    pub now_us: u64,
}

impl World {
    /// An engine with `n` clients, ids 1..=n.
    pub fn new(n: u64) -> World {
        World {
            engine: Engine::new(Config {
                hash_seed: 7,
                ..Config::default()
            }),
            clients: (1..=n)
                .map(|id| Client {
                    id,
                    created_us: T0,
                    ..Client::default()
                })
                .collect(),
            now_us: T0,
        }
    }

    /// Runs a space-separated command as client `id`: (flow, reply bytes).
    pub fn run(&mut self, id: u64, line: &str) -> (Flow, String) {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        let client = &mut self.clients[id as usize - 1];
        let flow = self.engine.exec(client, &argv, self.now_us, &mut out);
        (flow, String::from_utf8(out).unwrap())
    }

    /// Runs a command that must not block and returns its reply.
    pub fn cmd(&mut self, id: u64, line: &str) -> String {
        let (flow, out) = self.run(id, line);
        assert_eq!(flow, Flow::Continue, "{line}");
        out
    }

    /// Runs a command that must park its client (no reply written).
    pub fn park(&mut self, id: u64, line: &str) {
        let (flow, out) = self.run(id, line);
        assert_eq!(flow, Flow::Block, "{line} must block");
        assert_eq!(out, "", "a parked command writes no reply");
    }

    pub fn deliveries(&mut self) -> Vec<Delivery> {
        let mut v = Vec::new();
        self.engine.take_deliveries(&mut v);
        v
    }
}

/// The delivery that unblocks client `id` with `bytes`.
pub fn unblock(id: u64, bytes: &str) -> Delivery {
    Delivery {
        client_id: id,
        bytes: bytes.as_bytes().to_vec(),
        unblock: true,
    }
}
