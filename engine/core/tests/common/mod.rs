//! The engine-level test harness shared by the tests in engine/core/tests: one engine and one
//! client at a fixed clock, commands written as space-separated lines, replies as RESP text.
#![allow(dead_code)]

use engine_core::{Client, Config, Engine};

pub const T0: u64 = 1_767_225_600_000_000;

pub struct Session {
    pub engine: Engine,
    pub client: Client,
}

impl Session {
    pub fn new() -> Session {
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

    pub fn cmd(&mut self, line: &str) -> String {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        self.engine.exec(&mut self.client, &argv, T0, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}
