//! The supervisor's side of `recached resize` (`crate::resize`): a request file and a signal.
//!
//! The CLI writes `DIR/resize.toml` (temp file + rename) and sends SIGUSR1 to the supervisor;
//! the supervisor's loop (woken through the self-pipe, like SIGCHLD) reads it, acts, and
//! writes `DIR/resize.reply.toml` with the request's `id`. Files rather than a socket: the
//! pid file already tells the CLI which process runs the fleet, nothing new listens, and only
//! the user owning `DIR` can ask. Requests:
//!
//! - `describe`: the fleet as the supervisor runs it (engine count, topology, whether it is a
//!   cluster, an explicit `nodes` list, a re-shard at start still running).
//! - `grow` to N: starts engines `current..N` on `engine_port_base + i` with the N-engine
//!   topology (`--cluster-nodes <all N> --cluster-index i`). The CLI has written their
//!   `nodes-<port>.conf` first (every node and slot owner, no slot of their own), which the
//!   engine loads over `--cluster-nodes`. They are supervised like the others from then on,
//!   and the proxy's and fan-out's argv (used at their next restart) list them.
//! - `retire` to N: the CLI has moved every slot off the engines `N..current`, made the others
//!   `FORGET` them and checked they hold no key; SIGTERM (SIGKILL after `stop_timeout_ms`),
//!   their slots removed, `dump-<port>.rcs` and `nodes-<port>.conf` deleted.
//!
//! The new count lives in the supervisor's memory: a later `recached start` takes its count
//! from its flags or config as always (docs/operations.md, "Resizing a running fleet").

use std::fs;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::{Slot, Supervisor, check_ports_distinct};
use crate::state::Role;

/// The request file in `dir`.
pub const REQUEST_FILE: &str = "resize.toml";
/// The reply file in `dir`.
pub const REPLY_FILE: &str = "resize.reply.toml";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub id: String,
    /// `describe`, `grow` or `retire`.
    pub op: String,
    #[serde(default)]
    pub engines: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    pub id: String,
    pub ok: bool,
    pub message: String,
    /// Engines running after the request.
    pub engines: usize,
    /// Their `host:port` in instance order (what `--cluster-nodes` says).
    pub topology: Vec<String>,
    /// The address to connect to for each (a wildcard bind is reached on loopback).
    pub connect: Vec<String>,
    pub cluster: bool,
    pub explicit_nodes: bool,
    pub reshard_running: bool,
    pub engine_port_base: u16,
    /// The config file the fleet runs with, if any (for the CLI's credentials).
    pub config: Option<String>,
}

impl Supervisor {
    /// SIGUSR1: answer the request in `dir/resize.toml`, if any.
    pub(super) fn handle_resize_request(&mut self) {
        let text = match fs::read_to_string(self.dir.join(REQUEST_FILE)) {
            Ok(t) => t,
            Err(e) => {
                log::warn!("SIGUSR1 without a readable {REQUEST_FILE}: {e}");
                return;
            }
        };
        let req: Request = match toml::from_str(&text) {
            Ok(r) => r,
            Err(e) => {
                log::error!("{REQUEST_FILE}: {e}");
                return;
            }
        };
        let result = match req.op.as_str() {
            "describe" => Ok(String::new()),
            "grow" => self.grow(req.engines),
            "retire" => self.retire(req.engines),
            other => Err(format!("unknown resize request {other:?}")),
        };
        let mut reply = self.describe();
        reply.id = req.id;
        match result {
            Ok(m) => {
                reply.ok = true;
                reply.message = m;
            }
            Err(e) => {
                log::error!("resize: {e}");
                reply.message = e;
            }
        }
        let tmp = self.dir.join(format!("{REPLY_FILE}.tmp"));
        let written = toml::to_string(&reply)
            .map_err(|e| e.to_string())
            .and_then(|t| fs::write(&tmp, t).map_err(|e| e.to_string()))
            .and_then(|()| fs::rename(&tmp, self.dir.join(REPLY_FILE)).map_err(|e| e.to_string()));
        if let Err(e) = written {
            log::error!("resize: writing {REPLY_FILE}: {e}");
        }
        self.write_state();
    }

    fn describe(&self) -> Reply {
        let engines: Vec<&Slot> = self
            .slots
            .iter()
            .filter(|s| s.role == Role::Engine)
            .collect();
        Reply {
            engines: engines.len(),
            topology: self.cfg.topology(),
            connect: engines
                .iter()
                .map(|s| crate::config::host_port(super::connect_host(&s.host), s.port))
                .collect(),
            cluster: self.cfg.cluster,
            explicit_nodes: !self.cfg.nodes.is_empty(),
            reshard_running: self.reshard.is_some(),
            engine_port_base: self.cfg.engine_port_base,
            config: self.config_file.as_ref().map(|p| p.display().to_string()),
            ..Reply::default()
        }
    }

    /// What every resize needs: a single-host cluster fleet not re-sharding at start.
    fn resizable(&self) -> Result<(), String> {
        if !self.cfg.cluster {
            return Err(
                "resize refused: the fleet runs with cluster = false (engines that do \
                        not speak the cluster protocol cannot move slots)"
                    .into(),
            );
        }
        if !self.cfg.nodes.is_empty() {
            return Err(
                "resize refused: an explicit `nodes` topology (several hosts) is not \
                        supported yet; change it in the config and restart the fleet"
                    .into(),
            );
        }
        if self.reshard.is_some() {
            return Err("resize refused: the re-shard of the last start is still running".into());
        }
        Ok(())
    }

    fn grow(&mut self, n: usize) -> Result<String, String> {
        self.resizable()?;
        let current = self.engine_count;
        if n <= current {
            return Ok(format!("{current} engines already run"));
        }
        let mut next = self.cfg.clone();
        next.engines = n;
        next.validate()?;
        check_ports_distinct(&next)?;
        let new: Vec<(usize, String, u16)> = next.local_engines().split_off(current);
        for (_, host, port) in &new {
            std::net::TcpListener::bind((host.as_str(), *port))
                .map_err(|e| format!("resize refused: cannot listen on {host}:{port}: {e}"))?;
            let conf = self.dir.join(format!("nodes-{port}.conf"));
            if !conf.exists() {
                return Err(format!("{} is missing", conf.display()));
            }
        }
        self.cfg = next;
        let at = self
            .slots
            .iter()
            .rposition(|s| s.role == Role::Engine)
            .map_or(0, |i| i + 1);
        for (k, (i, host, port)) in new.into_iter().enumerate() {
            self.slots
                .insert(at + k, Slot::new(Role::Engine, i, host, port));
        }
        self.engine_count = n;
        for k in 0..n - current {
            self.spawn(at + k);
        }
        log::info!("resize: grown from {current} to {n} engines");
        Ok(format!("started engines {current}..{n}"))
    }

    fn retire(&mut self, n: usize) -> Result<String, String> {
        self.resizable()?;
        let current = self.engine_count;
        if n == 0 || n >= current {
            return Ok(format!("{current} engines run"));
        }
        let retired: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].role == Role::Engine && self.slots[i].index >= n)
            .collect();
        for &i in &retired {
            self.slots[i].restart_at = None;
            if let Some(c) = &self.slots[i].child {
                let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_millis(self.cfg.supervisor.stop_timeout_ms);
        for &i in &retired {
            let Some(mut child) = self.slots[i].child.take() else {
                continue;
            };
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                log::warn!("{} did not exit in time: SIGKILL", self.slots[i].label());
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        let ports: Vec<u16> = retired.iter().map(|&i| self.slots[i].port).collect();
        for &i in retired.iter().rev() {
            self.slots.remove(i);
        }
        self.cfg.engines = n;
        self.engine_count = n;
        // The CLI checked they held no key: their files would only confuse a later start.
        for port in &ports {
            for f in [format!("dump-{port}.rcs"), format!("nodes-{port}.conf")] {
                let _ = fs::remove_file(self.dir.join(f));
            }
        }
        log::info!("resize: retired engines {n}..{current} (ports {ports:?})");
        Ok(format!("retired engines {n}..{current}"))
    }
}
