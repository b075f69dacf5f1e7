//! The state file `dir/state.toml` (step 7 of the lifecycle in `crate::fleet`): the fleet as
//! of the supervisor's last change, read by `recached status`, the metrics endpoint and the
//! black-box tests. Written to a temp file then renamed, so readers never see half a file.
//! Its text is fixed (see the tests): roles and states are lowercase words.

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// State file name inside `dir`.
pub const STATE_FILE: &str = "state.toml";

/// What `recached status` needs to know about the fleet, written by the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetState {
    pub supervisor_pid: u32,
    /// Unix milliseconds.
    pub started_unix_ms: u64,
    /// Address the children listen on.
    pub bind: String,
    pub children: Vec<ChildState>,
}

/// One child process as of the last state write.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildState {
    pub role: Role,
    pub index: usize,
    /// Listen address; absent in state files of older versions (then the fleet's `bind`).
    #[serde(default)]
    pub host: Option<String>,
    pub port: u16,
    /// Absent while the child waits for its restart.
    pub pid: Option<u32>,
    pub state: RunState,
    /// Restarts since the fleet started.
    pub restarts: u64,
    /// When the current process was started, Unix milliseconds.
    pub started_unix_ms: u64,
}

/// What a supervised child is (written `engine`, `proxy`, `fanout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Engine,
    Proxy,
    /// The WebSocket fan-out to browser replicas (`recached fanout`).
    Fanout,
}

impl Role {
    /// The name in the state file, log file names (`engine-0.log`) and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Role::Engine => "engine",
            Role::Proxy => "proxy",
            Role::Fanout => "fanout",
        }
    }

    /// The `recached` subcommand the child runs.
    pub fn subcommand(self) -> &'static str {
        match self {
            Role::Engine => "server",
            Role::Proxy => "proxy",
            Role::Fanout => "fanout",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a child is doing as of the last state write (written as the lowercase word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    /// Dead, waiting out its restart backoff.
    Restarting,
    /// The fleet is stopping (SIGTERM sent to every child).
    Stopping,
    /// Exited with a status that forbids a restart (78: refused a corrupt snapshot).
    Failed,
}

impl RunState {
    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Restarting => "restarting",
            RunState::Stopping => "stopping",
            RunState::Failed => "failed",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Writes `dir/state.toml` through a temp file and a rename.
pub fn write(dir: &Path, state: &FleetState) -> io::Result<()> {
    let path = dir.join(STATE_FILE);
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    toml::to_string(state)
        .map_err(io::Error::other)
        .and_then(|text| fs::write(&tmp, text))
        .and_then(|_| fs::rename(&tmp, &path))
}

/// The fleet in `dir/state.toml`; `None` when it is missing or does not parse.
pub fn read(dir: &Path) -> Option<FleetState> {
    let text = fs::read_to_string(dir.join(STATE_FILE)).ok()?;
    toml::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_toml() {
        let s = FleetState {
            supervisor_pid: 1,
            started_unix_ms: 2,
            bind: "127.0.0.1".into(),
            children: vec![ChildState {
                role: Role::Engine,
                index: 0,
                host: Some("127.0.0.1".into()),
                port: 6400,
                pid: None,
                state: RunState::Restarting,
                restarts: 3,
                started_unix_ms: 4,
            }],
        };
        let text = toml::to_string(&s).unwrap();
        let back: FleetState = toml::from_str(&text).unwrap();
        assert_eq!(back.children[0].pid, None);
        assert_eq!(back.children[0].restarts, 3);
    }

    /// `status`, `metrics` and the black-box tests read this text: its bytes stay as they are.
    #[test]
    fn state_file_text_is_pinned() {
        let s = FleetState {
            supervisor_pid: 1,
            started_unix_ms: 2,
            bind: "0.0.0.0".into(),
            children: vec![
                ChildState {
                    role: Role::Engine,
                    index: 1,
                    host: Some("127.0.0.1".into()),
                    port: 6401,
                    pid: Some(77),
                    state: RunState::Running,
                    restarts: 0,
                    started_unix_ms: 5,
                },
                ChildState {
                    role: Role::Fanout,
                    index: 0,
                    host: None,
                    port: 6480,
                    pid: None,
                    state: RunState::Failed,
                    restarts: 2,
                    started_unix_ms: 6,
                },
            ],
        };
        let text = toml::to_string(&s).unwrap();
        assert_eq!(
            text,
            "supervisor_pid = 1\nstarted_unix_ms = 2\nbind = \"0.0.0.0\"\n\n\
             [[children]]\nrole = \"engine\"\nindex = 1\nhost = \"127.0.0.1\"\nport = 6401\n\
             pid = 77\nstate = \"running\"\nrestarts = 0\nstarted_unix_ms = 5\n\n\
             [[children]]\nrole = \"fanout\"\nindex = 0\nport = 6480\nstate = \"failed\"\n\
             restarts = 2\nstarted_unix_ms = 6\n"
        );
        let back: FleetState = toml::from_str(&text).unwrap();
        assert_eq!(toml::to_string(&back).unwrap(), text);
    }
}
