//! The engine: one keyspace plus settings and statistics. (Skeleton: to be completed.)
use crate::{Client, Flow, HostInfo};

/// Settings visible through CONFIG GET/SET (Redis names).
#[derive(Clone, Debug)]
pub struct Config {
    /// `proto-max-bulk-len`, bytes.
    pub proto_max_bulk_len: u64,
    /// `hz`: background tasks per second (active expiry).
    pub hz: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            proto_max_bulk_len: 512 * 1024 * 1024,
            hz: 10,
        }
    }
}

pub struct Engine {
    pub config: Config,
    pub host: HostInfo,
}

impl Engine {
    pub fn new(config: Config) -> Engine {
        Engine {
            config,
            host: HostInfo::default(),
        }
    }

    /// Runs one command. `argv[0]` is the command name (any case). The reply (one RESP frame,
    /// in `client.proto`) is appended to `out`. `now_us`: Unix time in microseconds.
    pub fn exec(
        &mut self,
        client: &mut Client,
        argv: &[&[u8]],
        now_us: u64,
        out: &mut Vec<u8>,
    ) -> Flow {
        let _ = (client, argv, now_us, out);
        todo!()
    }

    /// Background work for one tick of the server's timer (active expiry within a time budget,
    /// Redis `activeExpireCycle`). Called `hz` times per second.
    pub fn cron(&mut self, now_us: u64) {
        let _ = now_us;
    }

    /// One CLIENT LIST / CLIENT INFO line (no trailing newline) for `client`.
    pub fn client_info_line(&self, client: &Client, now_us: u64) -> String {
        let _ = (client, now_us);
        todo!()
    }

    /// Number of keys (DBSIZE).
    pub fn dbsize(&self) -> u64 {
        todo!()
    }
}
