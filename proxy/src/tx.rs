//! Transactions through the proxy: WATCH / MULTI / EXEC / DISCARD / UNWATCH. Pure: decides
//! what each request of a client in a transaction does; the event loop owns the connections.
//!
//! A transaction runs on **one instance**, over the client's dedicated connection to it
//! (`crate::dedicated`), as in Redis Cluster where a transaction's keys must share a slot
//! (here: an instance, so hash tags such as `{user1}.balance` keep keys together).
//!
//! | client sends | proxy does |
//! |---|---|
//! | `WATCH k…` (not in MULTI) | keys on one instance `i` → pin the client to `i` and forward; else `-CROSSSLOT` |
//! | `MULTI` | `+OK` at once; the instance is decided later (unless WATCH already pinned it, then MULTI is forwarded) |
//! | first keyed command after MULTI | pins the client to its keys' instance: `MULTI`, the held keyless commands and this one are sent there (the replies to `MULTI` and the held commands are dropped: the client already got `+OK` / `+QUEUED`) |
//! | keyless command before any keyed one (PING, …) | held by the proxy, answered `+QUEUED` (at most [`MAX_HELD`] commands and [`MAX_HELD_BYTES`]; then the transaction is pinned to the first instance that is up) |
//! | keyed command for another instance, or keys on several | `-CROSSSLOT Keys in request don't hash to the same slot`, and the transaction is **aborted** as Redis does on a queue-time error (Redis Cluster flags the transaction the same way): `EXEC` → `-EXECABORT Transaction discarded because of previous errors.` (the proxy sends `DISCARD` to the instance) |
//! | unknown command, wrong arity | Redis's error, transaction aborted (as Redis) |
//! | (P)SUBSCRIBE, SELECT, HELLO, CLIENT, … inside MULTI | `-ERR … not supported inside MULTI by the recached proxy`, transaction aborted |
//! | `EXEC` / `DISCARD` | forwarded; the client leaves the transaction. Never pinned: `EXEC` → `*0` (or the held commands run on the first instance up), `DISCARD` → `+OK` |
//! | `UNWATCH` (not in MULTI) | forwarded to the pinned instance; the client leaves the pin |
//! | between WATCH and MULTI | commands are routed as usual; those for the pinned instance use its dedicated connection |
//!
//! Keyless commands inside a pinned transaction (DBSIZE, KEYS, FLUSHDB, …) run on the
//! transaction's instance only. A nested `MULTI` and `WATCH` inside MULTI get Redis's errors
//! without aborting, as in Redis.

use std::borrow::Cow;

use engine_core::command::{self, CommandSpec};

use crate::route::{self, Args, CROSSSLOT};

/// Keyless commands held before a transaction has an instance: at most this many, and
/// this many bytes; past either the transaction is pinned to the first instance up.
pub const MAX_HELD: usize = 1024;
pub const MAX_HELD_BYTES: usize = 1 << 20;

/// `-EXECABORT …`, Redis 7's text.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// A client's transaction state (all false/empty outside a transaction).
#[derive(Debug, Default, Clone)]
pub struct Tx {
    /// The instance the transaction (or WATCH) runs on, once known.
    pub pinned: Option<usize>,
    /// WATCH was forwarded and not yet cleared by EXEC, DISCARD or UNWATCH.
    pub watching: bool,
    /// Inside MULTI.
    pub multi: bool,
    /// A queue-time error happened: EXEC must answer EXECABORT.
    pub aborted: bool,
    /// Keyless requests queued (answered `+QUEUED`) before the instance was known.
    pub held: Vec<Vec<u8>>,
    /// Their total size in bytes.
    pub held_bytes: usize,
}

/// What to do with one request of a client in a transaction.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Answer with these bytes.
    Reply(Cow<'static, [u8]>),
    /// Forward the request to the pinned instance's dedicated connection. `prelude`: send
    /// these first (MULTI and held commands), their replies dropped, because this request
    /// just decided the instance.
    Send {
        instance: usize,
        prelude: Vec<Vec<u8>>,
    },
    /// Send `DISCARD` to `instance` and answer EXECABORT once it is done.
    ExecAbort { instance: usize },
    /// Not a transaction matter (WATCH without MULTI): route as usual.
    Route,
    /// QUIT: answer `+OK` and close (the dedicated connection closes with the client).
    Quit,
}

impl Tx {
    /// Inside a transaction or WATCH.
    pub fn active(&self) -> bool {
        self.multi || self.watching
    }

    fn end(&mut self) -> (Option<usize>, bool, Vec<Vec<u8>>) {
        let r = (self.pinned, self.aborted, std::mem::take(&mut self.held));
        *self = Tx::default();
        r
    }

    /// Decides one request while [`Self::active`]. `raw` is the request as sent to an
    /// instance; `up[i]`: instance `i` is reachable (for pinning held commands).
    pub fn step<A: Args + ?Sized>(&mut self, args: &A, raw: &[u8], up: &[bool]) -> Step {
        let n = up.len();
        let Some(spec) = command::lookup(args.arg(0)).filter(|c| c.is_implemented()) else {
            self.abort_if_multi();
            return Step::Route; // the router answers "unknown command"
        };
        if !spec.arity_ok(args.argc()) {
            self.abort_if_multi();
            return Step::Route; // the router answers the arity error
        }
        match spec.name {
            "quit" => return Step::Quit,
            "multi" if self.multi => {
                return reply(b"-ERR MULTI calls can not be nested\r\n");
            }
            "multi" => {
                self.multi = true;
                return match self.pinned {
                    Some(instance) => Step::Send {
                        instance,
                        prelude: Vec::new(),
                    },
                    None => reply(b"+OK\r\n"),
                };
            }
            "exec" | "discard" if !self.multi => {
                return reply(if spec.name == "exec" {
                    b"-ERR EXEC without MULTI\r\n"
                } else {
                    b"-ERR DISCARD without MULTI\r\n"
                });
            }
            "exec" | "discard" => {
                let exec = spec.name == "exec";
                let (pinned, aborted, held) = self.end();
                return match (pinned, exec, aborted) {
                    (Some(instance), true, true) => Step::ExecAbort { instance },
                    (None, true, true) => reply(EXECABORT),
                    (Some(instance), _, _) => Step::Send {
                        instance,
                        prelude: Vec::new(),
                    },
                    (None, false, _) => reply(b"+OK\r\n"),
                    (None, true, false) if held.is_empty() => reply(b"*0\r\n"),
                    (None, true, false) => Step::Send {
                        instance: first_up(up),
                        prelude: with_multi(held),
                    },
                };
            }
            "watch" if self.multi => return reply(b"-ERR WATCH inside MULTI is not allowed\r\n"),
            "unwatch" if !self.multi => {
                let pinned = self.pinned;
                self.end();
                return match pinned {
                    Some(instance) => Step::Send {
                        instance,
                        prelude: Vec::new(),
                    },
                    None => reply(b"+OK\r\n"),
                };
            }
            _ => {}
        }
        // Subscriptions and connection settings would change the dedicated connection.
        let subscription = spec.has_flag(command::Flags::PUBSUB) && spec.name != "publish";
        let connection_state = subscription
            || matches!(
                spec.name,
                "select" | "hello" | "client" | "reset" | "readonly" | "readwrite"
            );
        if !self.multi {
            // WATCH only.
            return match spec.name {
                "watch" => match keyed_instance(spec, args, n) {
                    Target::One(i) if Some(i) == self.pinned => Step::Send {
                        instance: i,
                        prelude: Vec::new(),
                    },
                    _ => reply(CROSSSLOT),
                },
                _ if subscription => not_supported(spec, "while WATCH is active"),
                _ => Step::Route,
            };
        }
        if connection_state {
            self.aborted = true;
            return not_supported(spec, "inside MULTI");
        }
        match keyed_instance(spec, args, n) {
            Target::Cross => {
                self.aborted = true;
                reply(CROSSSLOT)
            }
            Target::One(i) => match self.pinned {
                Some(p) if p == i => Step::Send {
                    instance: i,
                    prelude: Vec::new(),
                },
                Some(_) => {
                    self.aborted = true;
                    reply(CROSSSLOT)
                }
                None => {
                    self.pinned = Some(i);
                    self.held_bytes = 0;
                    Step::Send {
                        instance: i,
                        prelude: with_multi(std::mem::take(&mut self.held)),
                    }
                }
            },
            Target::None => match self.pinned {
                Some(instance) => Step::Send {
                    instance,
                    prelude: Vec::new(),
                },
                None if self.held.len() < MAX_HELD
                    && self.held_bytes + raw.len() <= MAX_HELD_BYTES =>
                {
                    self.held_bytes += raw.len();
                    self.held.push(raw.to_vec());
                    reply(b"+QUEUED\r\n")
                }
                None => {
                    let instance = first_up(up);
                    self.pinned = Some(instance);
                    self.held_bytes = 0;
                    Step::Send {
                        instance,
                        prelude: with_multi(std::mem::take(&mut self.held)),
                    }
                }
            },
        }
    }

    fn abort_if_multi(&mut self) {
        if self.multi {
            self.aborted = true;
        }
    }

    /// The dedicated connection for a transaction's instance could not be had (limit,
    /// instance down): the transaction can no longer run.
    pub fn pin_failed(&mut self) {
        if self.multi {
            self.pinned = None;
            self.aborted = true;
        } else {
            *self = Tx::default();
        }
    }
}

fn reply(bytes: &'static [u8]) -> Step {
    Step::Reply(Cow::Borrowed(bytes))
}

fn not_supported(spec: &CommandSpec, context: &str) -> Step {
    let name = spec.name.replace('|', " ").to_uppercase();
    Step::Reply(Cow::Owned(
        format!("-ERR {name} is not supported {context} by the recached proxy\r\n").into_bytes(),
    ))
}

fn first_up(up: &[bool]) -> usize {
    up.iter().position(|&u| u).unwrap_or(0)
}

fn with_multi(held: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut prelude = Vec::with_capacity(held.len() + 1);
    let mut multi = Vec::new();
    resp::encode_request(&mut multi, &["MULTI"]);
    prelude.push(multi);
    prelude.extend(held);
    prelude
}

/// Where a request's keys live.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// No key (or keys that cannot be found because the request is malformed: the
    /// instance reports the syntax error).
    None,
    One(usize),
    Cross,
}

/// The instance of every key of a request ([`route::keys_instance`]: legacy key positions,
/// or the key specs for commands with movable keys).
pub fn keyed_instance<A: Args + ?Sized>(spec: &CommandSpec, args: &A, n: usize) -> Target {
    match route::keys_instance(spec, args, n) {
        Ok(Some(i)) => Target::One(i),
        Ok(None) => Target::None,
        Err(()) => Target::Cross,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::instance_of;

    fn step(tx: &mut Tx, args: &[&str]) -> Step {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        tx.step(&a[..], b"raw", &[true, true])
    }

    fn key_on(i: usize, prefix: &str) -> String {
        (0..1000)
            .map(|k| format!("{prefix}{k}"))
            .find(|k| instance_of(k.as_bytes(), 2) == i)
            .unwrap()
    }

    #[test]
    fn first_keyed_command_pins_and_sends_held_commands() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(step(&mut tx, &["PING"]), reply(b"+QUEUED\r\n"));
        let k = key_on(1, "k");
        match step(&mut tx, &["SET", &k, "v"]) {
            Step::Send { instance, prelude } => {
                assert_eq!(instance, 1);
                assert_eq!(prelude.len(), 2);
                assert_eq!(prelude[0], b"*1\r\n$5\r\nMULTI\r\n");
                assert_eq!(prelude[1], b"raw");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(tx.pinned, Some(1));
        // Keyless commands now go to the pinned instance.
        assert!(matches!(
            step(&mut tx, &["DBSIZE"]),
            Step::Send { instance: 1, .. }
        ));
        assert!(matches!(
            step(&mut tx, &["EXEC"]),
            Step::Send { instance: 1, .. }
        ));
        assert!(!tx.active());
    }

    #[test]
    fn another_instance_aborts_the_transaction() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        let (a, b) = (key_on(0, "a"), key_on(1, "b"));
        assert!(matches!(
            step(&mut tx, &["INCR", &a]),
            Step::Send { instance: 0, .. }
        ));
        assert_eq!(step(&mut tx, &["INCR", &b]), reply(CROSSSLOT));
        assert!(tx.aborted);
        assert_eq!(step(&mut tx, &["EXEC"]), Step::ExecAbort { instance: 0 });
        assert!(!tx.active());
        // Keys on two instances in one command, before any pin.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(
            step(&mut tx, &["SINTERSTORE", &a, &a, &b]),
            reply(CROSSSLOT)
        );
        assert_eq!(step(&mut tx, &["EXEC"]), reply(EXECABORT));
        // Movable keys are found from the key specs.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert!(matches!(
            step(&mut tx, &["ZUNIONSTORE", "{t}d", "2", "{t}a", "{t}b"]),
            Step::Send { .. }
        ));
        let other = key_on(1 - instance_of(b"t", 2), "o");
        assert_eq!(
            step(&mut tx, &["ZUNIONSTORE", "{t}d", "1", &other]),
            reply(CROSSSLOT)
        );
    }

    #[test]
    fn redis_errors_inside_multi() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(
            step(&mut tx, &["MULTI"]),
            reply(b"-ERR MULTI calls can not be nested\r\n")
        );
        assert_eq!(
            step(&mut tx, &["WATCH", "x"]),
            reply(b"-ERR WATCH inside MULTI is not allowed\r\n")
        );
        assert!(!tx.aborted);
        // Unknown commands and arity errors are answered by the router, and abort.
        assert_eq!(step(&mut tx, &["NOSUCH"]), Step::Route);
        assert!(tx.aborted);
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert!(matches!(step(&mut tx, &["SUBSCRIBE", "c"]), Step::Reply(_)));
        assert!(tx.aborted);
        // Never pinned: EXEC of nothing is an empty array, DISCARD is OK.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(step(&mut tx, &["EXEC"]), reply(b"*0\r\n"));
        assert_eq!(
            step(&mut Tx::default(), &["EXEC"]),
            reply(b"-ERR EXEC without MULTI\r\n")
        );
    }

    #[test]
    fn watch_pins_then_multi_is_forwarded() {
        let a = key_on(0, "w");
        let mut tx = Tx {
            watching: true,
            pinned: Some(0),
            ..Tx::default()
        };
        // Between WATCH and MULTI: ordinary routing, except more WATCHes on the instance.
        assert_eq!(step(&mut tx, &["GET", &a]), Step::Route);
        assert!(matches!(
            step(&mut tx, &["WATCH", &a]),
            Step::Send { instance: 0, .. }
        ));
        assert_eq!(step(&mut tx, &["WATCH", &key_on(1, "w")]), reply(CROSSSLOT));
        assert!(matches!(
            step(&mut tx, &["MULTI"]),
            Step::Send { instance: 0, .. }
        ));
        assert!(matches!(
            step(&mut tx, &["SET", &a, "1"]),
            Step::Send { instance: 0, .. }
        ));
        assert!(matches!(
            step(&mut tx, &["EXEC"]),
            Step::Send { instance: 0, .. }
        ));
        assert!(!tx.active());
        let mut tx = Tx {
            watching: true,
            pinned: Some(1),
            ..Tx::default()
        };
        assert!(matches!(
            step(&mut tx, &["UNWATCH"]),
            Step::Send { instance: 1, .. }
        ));
        assert!(!tx.active());
    }
}
