//! Transactions through the proxy: WATCH / MULTI / EXEC / DISCARD / UNWATCH. Pure: decides
//! what each request of a client in a transaction does; the event loop owns the connections.
//!
//! A transaction's part on each instance is queued on the client's dedicated connection to
//! it (`crate::dedicated`), so each instance answers `+QUEUED` or its queueing error itself.
//! A transaction on **one instance** (hash tags such as `{user1}.balance` keep keys together)
//! ends with its EXEC forwarded there, as before; one on **several** ends with a coordinated
//! EXEC (`crate::coord::Coord`); one holding a command that spans instances and cannot be
//! split runs **gathered** on one instance (`crate::coord::Gather`). docs/transactions.md has
//! the design.
//!
//! | client sends | proxy does |
//! |---|---|
//! | `WATCH k…` | each instance's keys on the client's connection to it |
//! | `MULTI` | `+OK` at once; forwarded to the instance WATCH pinned, else sent before the first command for each instance |
//! | first keyed command after MULTI | pins the client to its keys' instance: `MULTI`, the held keyless commands and this one are sent there (the replies to `MULTI` and the held commands are dropped: the client already got `+OK` / `+QUEUED`) |
//! | keyless command before any keyed one (PING, …) | held by the proxy, answered `+QUEUED` (at most [`MAX_HELD`] commands and [`MAX_HELD_BYTES`]; then the transaction is pinned to the first instance that is up) |
//! | keyed command for another instance | `MULTI` there first, then the command ([`Step::Send`]) |
//! | MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over several instances | split, one `+QUEUED` ([`Step::SendParts`]); merged at EXEC |
//! | any other command over several instances | `+QUEUED`; the transaction will run gathered ([`Tx::gather`]) |
//! | unknown command, wrong arity | Redis's error, transaction aborted (as Redis) |
//! | (P)SUBSCRIBE, SELECT, HELLO, CLIENT, … inside MULTI | `-ERR … not supported inside MULTI by the recached proxy`, transaction aborted |
//! | `EXEC` | one instance: forwarded; several: [`Step::Coordinate`]; gathered: [`Step::Gather`]; aborted: DISCARD everywhere, `-EXECABORT` |
//! | `DISCARD` / `UNWATCH` | to every instance involved |
//! | between WATCH and MULTI | commands are routed as usual; those for a watched instance use its dedicated connection |
//!
//! Keyless commands inside a transaction (DBSIZE, KEYS, FLUSHDB, …) run on its first instance
//! only. A nested `MULTI` and `WATCH` inside MULTI get Redis's errors without aborting, as in
//! Redis. A dedicated connection lost while it holds a part of the transaction aborts it
//! ([`Tx::instance_lost`]): EXEC answers EXECABORT, the client keeps its connection.

use std::borrow::Cow;

use engine_core::command::{self, CommandSpec};

use crate::coord::Entry;
use crate::route::{self, Args};
use crate::split::{self, Merge};

/// Keyless commands held before a transaction has an instance: at most this many, and
/// this many bytes; past either the transaction is pinned to the first instance up.
pub const MAX_HELD: usize = 1024;
pub const MAX_HELD_BYTES: usize = 1 << 20;

/// Most bytes of queued requests kept for a gathered run (see [`Tx::unit`]).
pub const MAX_UNIT_BYTES: usize = 64 << 20;

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
    /// The client's `MULTI` request when not spelled as [`MULTI_REQUEST`] (`multi`, say): sent
    /// to the engines as it came, so MONITOR shows it as the client wrote it, as Redis does.
    pub multi_spelling: Vec<u8>,
    /// A queue-time error happened: EXEC must answer EXECABORT.
    pub aborted: bool,
    /// Keyless requests queued (answered `+QUEUED`) before the instance was known.
    pub held: Vec<Vec<u8>>,
    /// Their total size in bytes.
    pub held_bytes: usize,
    /// Instances besides `pinned` holding a WATCH of the client (docs/transactions.md).
    pub watch_on: Vec<usize>,
    /// Instances besides `pinned` that were sent MULTI: their part of the transaction.
    pub multi_on: Vec<usize>,
    /// Commands queued per instance so far (instance, count): a command's index in its
    /// instance's EXEC reply.
    pub counts: Vec<(usize, usize)>,
    /// Where each queued command's reply comes from, in the client's order
    /// (`crate::coord`; used when the transaction spans instances).
    pub order: Vec<Entry>,
    /// Every queued request as sent, back to back (`unit_ends`: where each ends): run
    /// gathered on one instance at EXEC when [`Self::gather`] (`crate::coord::Gather`; their
    /// keys are read from them then). One buffer, kept between transactions, so queueing a
    /// command allocates nothing once warm. Past [`MAX_UNIT_BYTES`] it is dropped and a
    /// command spanning instances aborts the transaction (`-CROSSSLOT`).
    pub unit: Vec<u8>,
    pub unit_ends: Vec<usize>,
    pub unit_dropped: bool,
    /// A queued command has keys on several instances and cannot be split (RENAME, a
    /// script…): the whole transaction runs gathered.
    pub gather: bool,
    /// This transaction runs over the shared links (`crate::txshared`): its commands are
    /// answered `+QUEUED` here and kept per instance in [`Self::shared_parts`] until EXEC.
    pub shared: bool,
    /// Each instance's part of a shared transaction.
    pub shared_parts: Vec<SharedPart>,
    /// The client's last EXEC spanned instances: its next MULTI without WATCH runs over the
    /// shared links. Kept across transactions (a client of hash-tagged keys never pays for
    /// the shared path; one whose transactions span instances never pays for the dedicated
    /// connections' system calls).
    pub spanned_last: bool,
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
    /// Abort the transaction open on `instance` the way the client's was (a command refused
    /// while queueing, then `EXEC`), so that the instance's MONITOR shows the `EXEC` Redis
    /// shows, and answer EXECABORT once it is done.
    ExecAbort { instance: usize },
    /// EXEC or DISCARD of a transaction that reached no instance: answer `reply` here and
    /// show the client's MULTI (`multi`, as spelled) and this request to the proxy's
    /// monitors, the lines Redis shows for it (`crate::exec`, "MONITOR").
    LocalEnd {
        reply: &'static [u8],
        multi: Vec<u8>,
    },
    /// Send each part's prelude then request to its instance's dedicated connection; one
    /// reply, merged (a command split over instances inside MULTI, a WATCH of keys on
    /// several instances).
    SendParts { parts: Vec<SendPart>, merge: Merge },
    /// EXEC of a transaction spanning instances (`crate::coord`): (instance, MULTI sent).
    Coordinate {
        engines: Vec<(usize, bool)>,
        order: Vec<Entry>,
    },
    /// Run `unit` gathered on one instance (`crate::coord::Gather`): the EXEC of a
    /// transaction holding a command that spans instances and cannot be split.
    Gather {
        unit: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
        engines: Vec<(usize, bool)>,
    },
    /// DISCARD (where MULTI was sent) or UNWATCH on each instance, then answer `reply`: a
    /// DISCARD, UNWATCH or aborted EXEC of a transaction spanning instances.
    EndAll {
        engines: Vec<(usize, bool)>,
        reply: Cow<'static, [u8]>,
    },
    /// Not a transaction matter (WATCH without MULTI): route as usual.
    Route,
    /// QUIT: answer `+OK` and close (the dedicated connection closes with the client).
    Quit,
}

/// One part of [`Step::SendParts`].
#[derive(Debug, PartialEq, Eq)]
pub struct SendPart {
    pub instance: usize,
    pub prelude: Vec<Vec<u8>>,
    pub request: Vec<u8>,
}

impl Tx {
    /// Inside a transaction or WATCH.
    pub fn active(&self) -> bool {
        self.multi || self.watching
    }

    /// The transaction (or WATCH) involves more than one instance: its requests take the
    /// client's dedicated connections to several instances (`Lane::Spread`).
    pub fn spans_many(&self) -> bool {
        !self.watch_on.is_empty() || !self.multi_on.is_empty()
    }

    /// Whether the transaction or WATCH lives (partly) on `instance`.
    pub fn involves(&self, instance: usize) -> bool {
        self.pinned == Some(instance)
            || self.watch_on.contains(&instance)
            || self.multi_on.contains(&instance)
    }

    /// Every instance involved: (instance, MULTI was sent there).
    fn engines(&self) -> Vec<(usize, bool)> {
        let mut v: Vec<(usize, bool)> = Vec::new();
        if let Some(p) = self.pinned {
            v.push((p, self.multi));
        }
        for &i in &self.multi_on {
            if !v.iter().any(|&(j, _)| j == i) {
                v.push((i, true));
            }
        }
        for &i in &self.watch_on {
            if !v.iter().any(|&(j, _)| j == i) {
                v.push((i, false));
            }
        }
        v
    }

    /// Records one command queued on `instance`; its EXEC reply element index.
    fn queued_on(&mut self, instance: usize) -> usize {
        match self.counts.iter_mut().find(|(i, _)| *i == instance) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                self.counts.push((instance, 1));
                0
            }
        }
    }

    fn record(&mut self, instance: usize) {
        let index = self.queued_on(instance);
        self.order.push(Entry::One { instance, index });
    }

    /// A request for `instance` inside MULTI, once pinned elsewhere: it joins the
    /// transaction's part there (MULTI first if it has none yet).
    fn send_to_part(&mut self, instance: usize) -> Step {
        let prelude = self.part_prelude(instance);
        self.record(instance);
        Step::Send { instance, prelude }
    }

    fn part_prelude(&mut self, instance: usize) -> Vec<Vec<u8>> {
        if Some(instance) == self.pinned || self.multi_on.contains(&instance) {
            return Vec::new();
        }
        self.multi_on.push(instance);
        with_multi(&self.multi_spelling, Vec::new())
    }

    /// `MULTI` (the request `raw`): inside MULTI from now on, its spelling kept when it is not
    /// [`MULTI_REQUEST`]'s.
    pub fn open(&mut self, raw: &[u8]) {
        self.multi = true;
        if raw != MULTI_REQUEST {
            self.multi_spelling.extend_from_slice(raw);
        }
    }

    fn end(&mut self) -> (Option<usize>, bool, Vec<Vec<u8>>) {
        let r = (self.pinned, self.aborted, std::mem::take(&mut self.held));
        self.reset();
        r
    }

    /// Back to no transaction, keeping the buffers' capacity for the next one.
    pub fn reset(&mut self) {
        let Tx {
            pinned,
            watching,
            multi,
            multi_spelling,
            aborted,
            held,
            held_bytes,
            watch_on,
            multi_on,
            counts,
            order,
            unit,
            unit_ends,
            unit_dropped,
            gather,
            shared,
            shared_parts,
            spanned_last: _,
        } = self;
        (*pinned, *watching, *multi, *aborted) = (None, false, false, false);
        multi_spelling.clear();
        (*held_bytes, *unit_dropped, *gather, *shared) = (0, false, false, false);
        shared_parts.clear();
        held.clear();
        watch_on.clear();
        multi_on.clear();
        counts.clear();
        order.clear();
        unit.clear();
        unit_ends.clear();
    }

    /// The queued requests kept for a gathered run, one `Vec` each.
    fn unit_requests(&self) -> Vec<Vec<u8>> {
        let mut start = 0;
        self.unit_ends
            .iter()
            .map(|&end| {
                let r = self.unit[start..end].to_vec();
                start = end;
                r
            })
            .collect()
    }

    /// Ends a transaction (or WATCH) spanning instances: EXEC coordinated, or DISCARD /
    /// UNWATCH everywhere.
    fn end_many(&mut self, name: &str) -> Step {
        let engines = self.engines();
        let aborted = self.aborted;
        let order = std::mem::take(&mut self.order);
        self.reset();
        match name {
            "exec" if !aborted => Step::Coordinate { engines, order },
            "exec" => Step::EndAll {
                engines,
                reply: Cow::Borrowed(EXECABORT),
            },
            _ => Step::EndAll {
                engines,
                reply: Cow::Borrowed(b"+OK\r\n"),
            },
        }
    }

    /// WATCH of keys on several instances: each instance's keys on its connection.
    fn watch_many<A: Args + ?Sized>(
        &mut self,
        args: &A,
        n: impl crate::slots::SlotMap + Copy,
    ) -> Step {
        let all: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
        let s = split::split(&all, 1, |k| n.of(k));
        let parts = s
            .parts
            .into_iter()
            .map(|p| {
                if self.pinned.is_none() {
                    self.pinned = Some(p.instance);
                } else if Some(p.instance) != self.pinned && !self.watch_on.contains(&p.instance) {
                    self.watch_on.push(p.instance);
                }
                SendPart {
                    instance: p.instance,
                    prelude: Vec::new(),
                    request: p.request,
                }
            })
            .collect();
        self.watching = true;
        Step::SendParts {
            parts,
            merge: Merge::AllOk,
        }
    }

    /// A command whose keys are on several instances, inside MULTI: split as outside a
    /// transaction when it is one of the key-list commands, else `None`.
    fn split_in_multi<A: Args + ?Sized>(
        &mut self,
        spec: &CommandSpec,
        args: &A,
        n: impl crate::slots::SlotMap + Copy,
    ) -> Option<Step> {
        let (step, merge) = match spec.name {
            "mget" => (1, Merge::Values(Vec::new())),
            "del" | "unlink" | "exists" | "touch" => (1, Merge::Sum),
            "mset" => (2, Merge::AllOk),
            _ => return None,
        };
        if self.pinned.is_none() {
            // The held keyless commands go to the first part's instance.
            let first = n.of(args.arg(1));
            self.pin(first);
        }
        let all: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
        let s = split::split(&all, step, |k| n.of(k));
        let merge = match merge {
            Merge::Values(_) => Merge::Values(s.seq),
            other => other,
        };
        let mut entry_parts = Vec::new();
        let mut parts = Vec::new();
        for p in s.parts {
            // The pinned instance's part carries MULTI and the held commands when this
            // command pinned the transaction (it is the first key's instance).
            let mut prelude = if Some(p.instance) == self.pinned {
                std::mem::take(&mut self.held)
            } else {
                Vec::new()
            };
            prelude.extend(self.part_prelude(p.instance));
            entry_parts.push((p.instance, self.queued_on(p.instance)));
            parts.push(SendPart {
                instance: p.instance,
                prelude,
                request: p.request,
            });
        }
        self.order.push(Entry::Split {
            parts: entry_parts,
            merge,
        });
        Some(Step::SendParts {
            parts,
            merge: Merge::Fixed(b"+QUEUED\r\n".to_vec()),
        })
    }

    /// Pins the transaction to `instance`, its held keyless commands becoming the first
    /// queued there (sent by the caller as the prelude `with_multi(held)`).
    fn pin(&mut self, instance: usize) {
        self.pinned = Some(instance);
        self.held_bytes = 0;
        let held = std::mem::take(&mut self.held);
        for _ in 0..held.len() {
            self.record(instance);
        }
        self.held = with_multi(&self.multi_spelling, held);
    }

    /// Decides one request while [`Self::active`]. `raw` is the request as sent to an
    /// instance; `up[i]`: instance `i` is reachable (for pinning held commands).
    pub fn step<A: Args + ?Sized>(
        &mut self,
        args: &A,
        raw: &[u8],
        up: &[bool],
        n: impl crate::slots::SlotMap + Copy,
    ) -> Step {
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
                self.open(raw);
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
            "exec" if self.gather && !self.aborted => {
                let engines = self.engines();
                let unit = self.unit_requests();
                let keys = unit
                    .iter()
                    .flat_map(|r| route::keys_of_request(r))
                    .collect();
                self.reset();
                return Step::Gather {
                    unit,
                    keys,
                    engines,
                };
            }
            "exec" | "discard" if self.spans_many() => return self.end_many(spec.name),
            "exec" | "discard" => {
                let exec = spec.name == "exec";
                let spelling = std::mem::take(&mut self.multi_spelling);
                let (pinned, aborted, held) = self.end();
                let local = |reply: &'static [u8]| Step::LocalEnd {
                    reply,
                    multi: multi_name(&spelling),
                };
                return match (pinned, exec, aborted) {
                    (Some(instance), true, true) => Step::ExecAbort { instance },
                    (None, true, true) => local(EXECABORT),
                    (Some(instance), _, _) => Step::Send {
                        instance,
                        prelude: Vec::new(),
                    },
                    (None, false, _) => local(b"+OK\r\n"),
                    (None, true, false) if held.is_empty() => local(b"*0\r\n"),
                    (None, true, false) => Step::Send {
                        instance: first_up(up),
                        prelude: with_multi(&spelling, held),
                    },
                };
            }
            "watch" if self.multi => return reply(b"-ERR WATCH inside MULTI is not allowed\r\n"),
            "unwatch" if !self.multi && self.spans_many() => return self.end_many("unwatch"),
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
                    Target::One(i) if self.watch_on.contains(&i) => Step::Send {
                        instance: i,
                        prelude: Vec::new(),
                    },
                    Target::One(i) => {
                        self.watch_on.push(i);
                        Step::Send {
                            instance: i,
                            prelude: Vec::new(),
                        }
                    }
                    _ => self.watch_many(args, n),
                },
                _ if subscription => not_supported(spec, "while WATCH is active"),
                _ => Step::Route,
            };
        }
        if connection_state {
            self.aborted = true;
            return not_supported(spec, "inside MULTI");
        }
        // Kept for a gathered run at EXEC (`crate::coord::Gather`), within a bound.
        if !self.unit_dropped {
            self.unit.extend_from_slice(raw);
            self.unit_ends.push(self.unit.len());
            if self.unit.len() > MAX_UNIT_BYTES {
                self.unit_dropped = true;
                self.unit = Vec::new();
                self.unit_ends = Vec::new();
            }
        }
        if self.gather {
            return reply(b"+QUEUED\r\n");
        }
        match keyed_instance(key_row(spec, args), args, n) {
            Target::Cross => match self.split_in_multi(spec, args, n) {
                Some(step) => step,
                // Blocking commands would not block inside MULTI anyway; the whole
                // transaction runs gathered on one instance.
                None if !self.unit_dropped => {
                    self.gather = true;
                    reply(b"+QUEUED\r\n")
                }
                None => {
                    self.aborted = true;
                    reply(route::CROSSSLOT)
                }
            },
            Target::One(i) => match self.pinned {
                Some(p) if p == i => {
                    self.record(i);
                    Step::Send {
                        instance: i,
                        prelude: Vec::new(),
                    }
                }
                Some(_) => self.send_to_part(i),
                None => {
                    self.pin(i);
                    self.record(i);
                    Step::Send {
                        instance: i,
                        prelude: std::mem::take(&mut self.held),
                    }
                }
            },
            Target::None => match self.pinned {
                Some(instance) => {
                    self.record(instance);
                    Step::Send {
                        instance,
                        prelude: Vec::new(),
                    }
                }
                None if self.held.len() < MAX_HELD
                    && self.held_bytes + raw.len() <= MAX_HELD_BYTES =>
                {
                    self.held_bytes += raw.len();
                    self.held.push(raw.to_vec());
                    reply(b"+QUEUED\r\n")
                }
                None => {
                    let instance = first_up(up);
                    self.pin(instance);
                    self.record(instance);
                    Step::Send {
                        instance,
                        prelude: std::mem::take(&mut self.held),
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

    /// The dedicated connection to `instance` could not be had (limit, instance down): the
    /// transaction can no longer run. The parts already queued on OTHER instances stay known,
    /// so that EXEC/DISCARD still discards them there (else their queued commands would stay
    /// in the connection's MULTI and run with the client's next transaction).
    pub fn pin_failed(&mut self, instance: usize) {
        if self.multi {
            if self.pinned == Some(instance) {
                self.pinned = None;
            }
            self.aborted = true;
        } else {
            self.reset();
        }
    }
}

impl Tx {
    /// The client's dedicated connection to `instance` failed while the transaction (or
    /// WATCH) had a part there: that part is gone, so the transaction fails — its EXEC answers
    /// EXECABORT after the other parts are discarded — and the client keeps its connection.
    pub fn instance_lost(&mut self, instance: usize) {
        self.watch_on.retain(|&i| i != instance);
        self.multi_on.retain(|&i| i != instance);
        if self.pinned == Some(instance) {
            self.pinned = None;
        }
        self.aborted = true;
    }
}

/// The command name of the client's MULTI request as it spelled it: `spelling` is the
/// request's RESP bytes when they are not [`MULTI_REQUEST`]'s ([`Tx::open`]), else empty.
fn multi_name(spelling: &[u8]) -> Vec<u8> {
    let mut lines = spelling
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    match (lines.next(), lines.next(), lines.next()) {
        (Some(b"*1"), Some(len), Some(name)) if len.first() == Some(&b'$') => name.to_vec(),
        _ => b"MULTI".to_vec(),
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

/// `MULTI` as a request (the first of a prelude).
pub const MULTI_REQUEST: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";

/// One instance's part of a transaction over the shared links (`crate::txshared`).
#[derive(Debug, Clone, Default)]
pub struct SharedPart {
    pub instance: usize,
    /// `TXPREP`'s arguments after the timeout: each command as its argument count, then its
    /// arguments as they came.
    pub body: Vec<u8>,
    /// Arguments in `body`.
    pub elements: usize,
    /// Commands in `body`.
    pub commands: usize,
}

/// Appends `request` (a multibulk of bulk strings, as every request is by the time it gets
/// here: inline ones are re-encoded) to `instance`'s part in `parts`: its argument count as a
/// bulk string, then its arguments as they came. A prelude's `MULTI` is left out: `TXPREP`
/// opens its own.
pub fn queue_shared(parts: &mut Vec<SharedPart>, instance: usize, request: &[u8]) {
    if is_multi(request) {
        return;
    }
    let Some(rest) = request.strip_prefix(b"*") else {
        return;
    };
    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
        return;
    };
    let (count, args) = (&rest[..eol], &rest[eol + 2..]);
    let Some(n) = resp::parse_i64(count).and_then(|n| usize::try_from(n).ok()) else {
        return;
    };
    let k = match parts.iter().position(|p| p.instance == instance) {
        Some(k) => k,
        None => {
            parts.push(SharedPart {
                instance,
                ..SharedPart::default()
            });
            parts.len() - 1
        }
    };
    let p = &mut parts[k];
    let mut len = itoa::Buffer::new();
    for piece in [
        b"$",
        len.format(count.len()).as_bytes(),
        b"\r\n",
        count,
        b"\r\n",
        args,
    ] {
        p.body.extend_from_slice(piece);
    }
    p.elements += 1 + n;
    p.commands += 1;
}

/// `request` is `MULTI`, however spelled.
fn is_multi(request: &[u8]) -> bool {
    request.len() == MULTI_REQUEST.len()
        && request.starts_with(b"*1\r\n$5\r\n")
        && request[8..13].eq_ignore_ascii_case(b"multi")
}

/// `MULTI` (as the client spelled it: `spelling`, else [`MULTI_REQUEST`]) and then `held`.
fn with_multi(spelling: &[u8], held: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut prelude = Vec::with_capacity(held.len() + 1);
    prelude.push(if spelling.is_empty() {
        MULTI_REQUEST.to_vec()
    } else {
        spelling.to_vec()
    });
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

/// The row whose keys a request has: a container's subcommand (OBJECT ENCODING, MEMORY
/// USAGE…, as the router reads them), else the command itself.
fn key_row<'a, A: Args + ?Sized>(spec: &'a CommandSpec, args: &A) -> &'a CommandSpec {
    if !spec.subcommands.is_empty() && args.argc() >= 2 {
        spec.subcommand(args.arg(1)).unwrap_or(spec)
    } else {
        spec
    }
}

/// The instance of every key of a request ([`route::keys_instance`]: legacy key positions,
/// or the key specs for commands with movable keys).
pub fn keyed_instance<A: Args + ?Sized>(
    spec: &CommandSpec,
    args: &A,
    n: impl crate::slots::SlotMap + Copy,
) -> Target {
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
        let mut raw = Vec::new();
        resp::encode_request(&mut raw, &a);
        tx.step(&a[..], &raw, &[true, true], 2)
    }

    fn key_on(i: usize, prefix: &str) -> String {
        (0..1000)
            .map(|k| format!("{prefix}{k}"))
            .find(|k| instance_of(k.as_bytes(), 2) == i)
            .unwrap()
    }

    #[test]
    fn a_part_that_cannot_be_sent_keeps_the_other_parts_for_discard() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        let (k0, k1) = (key_on(0, "k"), key_on(1, "k"));
        assert!(matches!(
            step(&mut tx, &["SET", &k0, "v"]),
            Step::Send { instance: 0, .. }
        ));
        assert!(matches!(
            step(&mut tx, &["SET", &k1, "v"]),
            Step::Send { instance: 1, .. }
        ));
        tx.pin_failed(1); // instance 1 is down: its connection could not be had
        // EXEC discards instance 0's part (queued there) instead of leaving it to run with
        // the client's next transaction.
        match step(&mut tx, &["EXEC"]) {
            Step::EndAll { engines, reply } => {
                assert!(engines.contains(&(0, true)), "{engines:?}");
                assert_eq!(&reply[..], EXECABORT);
            }
            other => panic!("{other:?}"),
        }
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
                assert_eq!(prelude[1], b"*1\r\n$4\r\nPING\r\n");
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

    /// A container's subcommand is routed by its own keys (OBJECT ENCODING k: the key is
    /// argument 2), as outside MULTI; the container has none.
    #[test]
    fn subcommand_keys_pin_the_transaction() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        let k = key_on(1, "k");
        assert_ne!(
            instance_of(b"encoding", 2),
            1,
            "the test needs the subcommand elsewhere"
        );
        match step(&mut tx, &["OBJECT", "encoding", &k]) {
            Step::Send { instance, .. } => assert_eq!(instance, 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(tx.pinned, Some(1));
    }

    #[test]
    fn another_instance_joins_the_transaction() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        let (a, b) = (key_on(0, "a"), key_on(1, "b"));
        assert!(matches!(
            step(&mut tx, &["INCR", &a]),
            Step::Send { instance: 0, .. }
        ));
        // The second instance gets MULTI before its first command.
        match step(&mut tx, &["INCR", &b]) {
            Step::Send { instance, prelude } => {
                assert_eq!(instance, 1);
                assert_eq!(prelude, vec![b"*1\r\n$5\r\nMULTI\r\n".to_vec()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            step(&mut tx, &["INCR", &b]),
            Step::Send { instance: 1, ref prelude } if prelude.is_empty()
        ));
        assert!(!tx.aborted);
        match step(&mut tx, &["EXEC"]) {
            Step::Coordinate { engines, order } => {
                assert_eq!(engines, vec![(0, true), (1, true)]);
                assert_eq!(
                    order,
                    vec![
                        Entry::One {
                            instance: 0,
                            index: 0
                        },
                        Entry::One {
                            instance: 1,
                            index: 0
                        },
                        Entry::One {
                            instance: 1,
                            index: 1
                        },
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!tx.active());
        // A key-list command over two instances is split; its parts merge at EXEC.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(step(&mut tx, &["PING"]), reply(b"+QUEUED\r\n"));
        match step(&mut tx, &["MGET", &a, &b, &a]) {
            Step::SendParts { parts, merge } => {
                assert_eq!(parts.len(), 2);
                assert_eq!(parts[0].instance, 0);
                assert_eq!(parts[0].prelude.len(), 2, "MULTI and the held PING");
                assert_eq!(parts[1].prelude.len(), 1, "MULTI");
                assert_eq!(merge, Merge::Fixed(b"+QUEUED\r\n".to_vec()));
            }
            other => panic!("{other:?}"),
        }
        match step(&mut tx, &["DISCARD"]) {
            Step::EndAll { engines, reply } => {
                assert_eq!(engines, vec![(0, true), (1, true)]);
                assert_eq!(&*reply, b"+OK\r\n");
            }
            other => panic!("{other:?}"),
        }
        // Other commands over several instances make the whole transaction run gathered.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(
            step(&mut tx, &["INCR", &a]),
            Step::Send {
                instance: 0,
                prelude: with_multi(&[], Vec::new())
            }
        );
        assert_eq!(
            step(&mut tx, &["SINTERSTORE", &a, &a, &b]),
            reply(b"+QUEUED\r\n")
        );
        assert_eq!(step(&mut tx, &["INCR", &b]), reply(b"+QUEUED\r\n"));
        match step(&mut tx, &["EXEC"]) {
            Step::Gather {
                unit,
                keys,
                engines,
            } => {
                assert_eq!(unit.len(), 3);
                assert_eq!(
                    keys,
                    vec![
                        a.as_bytes().to_vec(),
                        a.as_bytes().to_vec(),
                        a.as_bytes().to_vec(),
                        b.as_bytes().to_vec(),
                        b.as_bytes().to_vec()
                    ]
                );
                assert_eq!(engines, vec![(0, true)]);
            }
            other => panic!("{other:?}"),
        }
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
            reply(b"+QUEUED\r\n")
        );
        assert!(tx.gather);
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
        // Never pinned: EXEC of nothing is an empty array, DISCARD is OK, answered here
        // with the client's MULTI as spelled for MONITOR.
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        assert_eq!(
            step(&mut tx, &["EXEC"]),
            Step::LocalEnd {
                reply: b"*0\r\n",
                multi: b"MULTI".to_vec()
            }
        );
        let mut tx = Tx::default();
        tx.open(b"*1\r\n$5\r\nmulti\r\n");
        assert_eq!(
            step(&mut tx, &["DISCARD"]),
            Step::LocalEnd {
                reply: b"+OK\r\n",
                multi: b"multi".to_vec()
            }
        );
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
        // A key of another instance is watched there.
        assert!(matches!(
            step(&mut tx, &["WATCH", &key_on(1, "w")]),
            Step::Send { instance: 1, .. }
        ));
        assert!(tx.spans_many());
        assert!(matches!(step(&mut tx, &["UNWATCH"]), Step::EndAll { .. }));
        let mut tx = Tx {
            watching: true,
            pinned: Some(0),
            ..Tx::default()
        };
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
