//! MULTI / EXEC / DISCARD / WATCH against a real redis-server and a recached engine, with the
//! same expectations (exact reply bytes) for both, so the expectations are checked too.
//!
//! Covers what one connection in the differential cases cannot: WATCH broken by another
//! client, by expiry (lazy and active), by FLUSHALL from another client, and a watching client
//! that disconnects.
//!
//! # Through the proxy, keys on several engines (issue 20)
//!
//! `MULTI`/`EXEC`/`DISCARD`, `WATCH`/`UNWATCH`, pipelined transactions, multi-key commands and
//! scripts, and a Jepsen-style bank test, against a 2-engine and a 4-engine `recached start`
//! fleet (tests/tests/transactions_gather.rs has more of the multi-key commands). The design:
//! docs/transactions.md, proxy/src/coord.rs, proxy/src/tx.rs, engine/core/src/txlock.rs.
//!
//! **Exact replies.** Every scenario with a fixed outcome runs first against a real
//! redis-server 7.0 (one process: the reference), then through the proxy of a 2-engine and of a
//! 4-engine fleet, with the same literal expectations, so the expectations are checked too.
//! Keys are chosen per target so that `k0`…`k3` live on engines 0…3 (mod N): every transaction
//! spans every engine of the fleet. "Another client" is a second connection to the proxy, or a
//! connection straight to the engine that owns the key (a smart client).
//!
//! - RESP2 and RESP3 (`HELLO 3`) EXEC arrays with values from several engines, split commands
//!   (MGET, MSET, DEL, EXISTS) merged in place, runtime errors inline, a keyless command;
//!   nothing is visible to another client before EXEC;
//! - DISCARD (drops the queue and the WATCHes), EXEC/DISCARD without MULTI;
//! - EXECABORT after a queueing error (unknown command, wrong arity) on any engine: nothing ran;
//! - WATCH of keys on several engines, aborted (`*-1` / RESP3 `_`) by a change through the
//!   proxy, directly on an engine, by the watcher itself, of a key whose engine has no queued
//!   command; not aborted after UNWATCH or without a change;
//! - pipelined transactions: several transactions and plain commands in one write, a WATCH
//!   aborted in a pipeline, 50 transactions in one write;
//! - multi-key commands over engines (RENAME, COPY, MSETNX, SMOVE, S*STORE, LMOVE, LMPOP,
//!   SORT … STORE, Z*STORE, ZMPOP, BITOP, PFMERGE, GEOSEARCHSTORE, XREAD) and scripts moving
//!   values between engines (EVAL, EVALSHA), alone and inside MULTI, results read back from
//!   their owners; the blocking ones (BLPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZMPOP)
//!   answering at once, timing out, and woken by another client's push.
//!
//! **Faults, deterministically**: an engine SIGKILLed (and restarted) while a transaction is
//! queued on it, or while a key of it is watched: nothing runs; an engine down while a
//! transaction is queued: its command is refused and the whole is aborted, the live engine's
//! queued part discarded (not run with the client's next transaction).
//!
//! **The engines' key locks** (`TXLOCK`/`TXUNLOCK`, engine/core/src/txlock.rs) on one engine:
//! a locked key's readers and writers are postponed until unlock, other keys are not; a lock
//! past its timeout is released and the late EXEC refused; a holder that disconnects releases;
//! the flags for a changed watched key and a queueing error; `TXLOCK … KEYS` waits for the
//! holder of a named key; two holders with queued scripts do not wait for each other.
//!
//! **Bank** (Jepsen's bank test): 40 accounts spread evenly over the engines, 4 clients doing
//! random cross-engine transfers (`MULTI DECRBY a n INCRBY b n EXEC`, pipelined in one write),
//! 2 readers taking `MULTI MGET <all 40> EXEC`, a smart client doing transfers between two
//! accounts of one engine directly on that engine's port, and 3 clients incrementing a pair of
//! counters on two engines with `WATCH`/`GET`/`MULTI`/`SET`/`SET`/`EXEC` (compare-and-set),
//! all for a bounded time. Asserted: every read sums to the initial total; every account ends
//! at its initial balance plus the transfers that were answered as committed (an exact ledger:
//! no transfer answered "committed" is lost, none answered "not run" ran); both counters end
//! at the number of successful CAS rounds and every success wrote a distinct value (no lost
//! update); every request got an answer within the client's read timeout. Also with half the
//! transfer clients moving money by a script over both accounts (EVAL, run gathered).
//!
//! **Bank with an engine SIGKILLed** and restarted by the supervisor mid-run (2 and 4 engines,
//! and 4 with script transfers): see [`bank_with_a_killed_engine`] for what can and cannot be
//! asserted and why.
//!
//! **Browser replica**: a replica (the wasm module's code, natively) subscribed to the accounts
//! through the fleet's fan-out converges to the engines' final values after a bank run; and the
//! real one, the wasm module in headless Chromium (tests/browser/bank.test.mjs), over 2 engines:
//! its local reads end equal to the proxy's, the accounts sum to the total in the page, and it
//! applied exactly the keychanges the run's ledger predicts for each key (every engine's keys
//! included: the effects of cross-engine transactions reach the feed), with no resync.
//!
//! The proxy's tests of this file run one at a time ([`serial`]): each starts fleets, and the bank
//! runs measure time on a small shared machine. Every loop is bounded in count and time;
//! processes are killed by PID on drop ([`Fleet`], [`Proc`]).

mod common;

use common::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use engine_core::slot::instance_for_key;

#[test]
fn multi_exec_replies_in_order_with_runtime_errors_inline() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        assert_eq!(cmd(&mut c, &["MULTI"]), "+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["SET", "a", "x"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["INCR", "a"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["APPEND", "a", "y"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "*3\\r\\n+OK\\r\\n-ERR value is not an integer or out of range\\r\\n:2\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut c, &["GET", "a"]), "$2\\r\\nxy\\r\\n", "{who}");
        // Nothing runs before EXEC: another client sees the old value meanwhile.
        let mut other = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["SET", "a", "new"]);
        assert_eq!(cmd(&mut other, &["GET", "a"]), "$2\\r\\nxy\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut other, &["GET", "a"]), "$3\\r\\nnew\\r\\n", "{who}");
    });
}

#[test]
fn queue_time_errors_abort_with_execabort() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        assert_eq!(cmd(&mut c, &["SET", "k", "1"]), "+QUEUED\\r\\n", "{who}");
        assert!(
            cmd(&mut c, &["NOSUCH"]).starts_with("-ERR unknown command"),
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut c, &["GET", "k"]), "$-1\\r\\n", "{who}");
        // Arity errors abort too; MULTI state is gone after EXEC.
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET"]);
        assert!(cmd(&mut c, &["EXEC"]).starts_with("-EXECABORT"), "{who}");
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "-ERR EXEC without MULTI\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn discard_drops_the_queue_and_the_watches() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        let mut other = Resp::connect(port);
        cmd(&mut c, &["WATCH", "w"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["SET", "d", "1"]);
        assert_eq!(cmd(&mut c, &["DISCARD"]), "+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["GET", "d"]), "$-1\\r\\n", "{who}");
        // The WATCH went with DISCARD: a change now does not fail the next transaction.
        cmd(&mut other, &["SET", "w", "changed"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "w"]);
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "*1\\r\\n$7\\r\\nchanged\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["DISCARD"]),
            "-ERR DISCARD without MULTI\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn watch_fails_when_another_client_writes_the_key() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        let mut other = Resp::connect(port);
        cmd(&mut c, &["SET", "bal", "10"]);
        // Unchanged: EXEC runs.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n:15\\r\\n", "{who}");
        // Changed by another client between WATCH and EXEC: null array, nothing applied.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut other, &["INCRBY", "bal", "100"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["GET", "bal"]), "$3\\r\\n115\\r\\n", "{who}");
        // Changed during MULTI (after queueing began) also counts.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        cmd(&mut other, &["DEL", "bal"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // FLUSHALL from another client touches an existing watched key.
        cmd(&mut c, &["SET", "f", "1"]);
        cmd(&mut c, &["WATCH", "f", "never-existed"]);
        cmd(&mut other, &["FLUSHALL"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // ... but not a missing one.
        cmd(&mut c, &["WATCH", "never-existed"]);
        cmd(&mut other, &["FLUSHALL"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+PONG\\r\\n", "{who}");
        // RESP3: the failed EXEC is a RESP3 null.
        cmd(&mut c, &["HELLO", "3"]);
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut other, &["SET", "bal", "0"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "bal"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "_\\r\\n", "{who}");
    });
}

#[test]
fn watch_fails_when_the_key_expires() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        // Expires while watched, never accessed: EXEC sees it expired (Redis 7).
        cmd(&mut c, &["SET", "e1", "v", "PX", "200"]);
        cmd(&mut c, &["WATCH", "e1"]);
        std::thread::sleep(Duration::from_millis(400));
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // Expires and is reclaimed by the active cycle or another client's read.
        let mut other = Resp::connect(port);
        cmd(&mut c, &["SET", "e2", "v", "PX", "200"]);
        cmd(&mut c, &["WATCH", "e2"]);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(cmd(&mut other, &["GET", "e2"]), "$-1\\r\\n", "{who}");
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // Already expired when watched: its reclamation is not a change.
        cmd(&mut c, &["SET", "e3", "v", "PX", "100"]);
        std::thread::sleep(Duration::from_millis(300));
        cmd(&mut c, &["WATCH", "e3"]);
        assert_eq!(cmd(&mut other, &["GET", "e3"]), "$-1\\r\\n", "{who}");
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+PONG\\r\\n", "{who}");
    });
}

#[test]
fn nesting_and_watch_inside_multi_are_refused_without_aborting() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        assert_eq!(
            cmd(&mut c, &["MULTI"]),
            "-ERR MULTI calls can not be nested\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["WATCH", "x"]),
            "-ERR WATCH inside MULTI is not allowed\\r\\n",
            "{who}"
        );
        cmd(&mut c, &["SET", "x", "1"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+OK\\r\\n", "{who}");
    });
}

/// A watching client that disconnects leaves nothing behind: its key can be written freely and
/// another client's WATCH on it works normally (engine only: the registry is internal).
#[test]
fn disconnecting_watcher_is_forgotten() {
    let port = free_port();
    let _engine = start_engine(port);
    let mut c = Resp::connect(port);
    for i in 0..200 {
        let mut w = Resp::connect(port);
        cmd(&mut w, &["WATCH", &format!("k{i}"), "shared"]);
        cmd(&mut w, &["MULTI"]);
        cmd(&mut w, &["SET", "shared", "x"]);
        drop(w);
    }
    // Disconnects are processed asynchronously; the engine must stay responsive and correct.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        cmd(&mut c, &["SET", "shared", "y"]);
        cmd(&mut c, &["WATCH", "shared"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "shared"]);
        if cmd(&mut c, &["EXEC"]) == "*1\\r\\n$1\\r\\ny\\r\\n" {
            break;
        }
        assert!(Instant::now() < deadline, "EXEC never succeeded");
    }
    assert_eq!(cmd(&mut c, &["GET", "shared"]), "$1\\r\\ny\\r\\n");
}

// =============================================================================================
// Through the proxy, keys on several engines (issue 20)

/// The tests of this file run one after the other (each starts fleets; the bank runs are
/// timed).
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Targets: redis-server (the reference) and fleets

/// Where a scenario runs: a redis-server (`engines` empty) or a fleet's proxy.
struct Target {
    who: String,
    port: u16,
    /// The fleet's engine ports, by instance (empty for redis-server).
    engines: Vec<u16>,
}

impl Target {
    /// Instances the keys are spread over (1 for redis-server).
    fn n(&self) -> usize {
        self.engines.len().max(1)
    }

    /// A key named `<prefix><engine>.<j>` owned by instance `engine % n` (the smallest such j).
    fn key(&self, prefix: &str, engine: usize) -> String {
        key_on(prefix, engine, self.n())
    }

    /// `k0`…`k3` under `prefix`: on instances 0, 1, 2, 3 (mod n).
    fn keys4(&self, prefix: &str) -> [String; 4] {
        [0, 1, 2, 3].map(|e| self.key(prefix, e))
    }

    fn connect(&self) -> Resp {
        Resp::connect(self.port)
    }

    /// A connection straight to the engine that owns `key` (redis-server itself).
    fn direct(&self, key: &str) -> Resp {
        if self.engines.is_empty() {
            return Resp::connect(self.port);
        }
        let i = instance_for_key(key.as_bytes(), self.engines.len() as u32) as usize;
        Resp::connect(self.engines[i])
    }
}

/// A key `<prefix><engine>.<j>` owned by instance `engine % n` of an `n`-instance fleet.
fn key_on(prefix: &str, engine: usize, n: usize) -> String {
    let want = (engine % n) as u32;
    (0..10_000)
        .map(|j| format!("{prefix}{engine}.{j}"))
        .find(|k| instance_for_key(k.as_bytes(), n as u32) == want)
        .expect("a key on every instance within 10,000 names")
}

/// Runs `check` against a fresh redis-server, then through the proxy of a fresh 2-engine and
/// a fresh 4-engine fleet: the same literal expectations for all three.
fn on_redis_and_fleets(name: &str, check: impl Fn(&Target)) {
    let _serial = serial();
    {
        let port = free_port();
        let _redis = start_redis(port);
        check(&Target {
            who: "redis-server".into(),
            port,
            engines: vec![],
        });
    }
    for n in [2, 4] {
        let fleet = Fleet::start(&format!("{name}-{n}"), n);
        check(&Target {
            who: format!("proxy of {n} engines"),
            port: fleet.proxy_port,
            engines: fleet.engine_ports.clone(),
        });
    }
}

/// Sends one command, returns its reply escaped (as [`cmd`]), asserting `want`.
#[track_caller]
fn expect(c: &mut Resp, args: &[&str], want: &str, who: &str) {
    let got = cmd(c, args);
    assert_eq!(got, want, "{who}: {args:?}");
}

/// Sends every command in ONE write, then reads one reply per command (escaped).
fn pipeline(c: &mut Resp, cmds: &[&[&str]]) -> Vec<String> {
    let mut out = Vec::new();
    for args in cmds {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        out.extend_from_slice(&Resp::encode(&args));
    }
    c.send_raw(&out);
    cmds.iter().map(|_| next(c)).collect()
}

const EXECABORT: &str = "-EXECABORT Transaction discarded because of previous errors.\\r\\n";

// ---------------------------------------------------------------------------------------------
// Exact replies

#[test]
fn multi_exec_over_engines_resp2() {
    on_redis_and_fleets("tx-resp2", |t| {
        let who = &t.who;
        let [k0, k1, k2, k3] = t.keys4("r2:");
        let mut c = t.connect();
        let mut other = t.connect();
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        for args in [
            vec!["SET", &k0, "a"],
            vec!["SET", &k1, "b"],
            vec!["INCR", &k0],
            vec!["GET", &k1],
            vec!["MGET", &k0, &k1, &k2, &k3],
            vec!["MSET", &k2, "c", &k3, "d"],
            vec!["PING"],
            vec!["DEL", &k2, &k3, &k0],
            vec!["EXISTS", &k0, &k1, &k2, &k3, &k1],
            vec!["APPEND", &k1, "c"],
        ] {
            expect(&mut c, &args, "+QUEUED\\r\\n", who);
        }
        // Nothing ran yet: another client sees none of it.
        expect(
            &mut other,
            &["MGET", &k0, &k1, &k2],
            "*3\\r\\n$-1\\r\\n$-1\\r\\n$-1\\r\\n",
            who,
        );
        expect(
            &mut c,
            &["EXEC"],
            "*10\\r\\n+OK\\r\\n+OK\\r\\n-ERR value is not an integer or out of range\\r\\n\
             $1\\r\\nb\\r\\n*4\\r\\n$1\\r\\na\\r\\n$1\\r\\nb\\r\\n$-1\\r\\n$-1\\r\\n+OK\\r\\n\
             +PONG\\r\\n:3\\r\\n:2\\r\\n:2\\r\\n",
            who,
        );
        // Every engine's part ran: read back from the owning engines directly.
        expect(&mut t.direct(&k1), &["GET", &k1], "$2\\r\\nbc\\r\\n", who);
        for k in [&k0, &k2, &k3] {
            expect(&mut t.direct(k), &["EXISTS", k], ":0\\r\\n", who);
        }
        // EXEC again: no transaction any more; the connection works on.
        expect(&mut c, &["EXEC"], "-ERR EXEC without MULTI\\r\\n", who);
        // MULTI with nothing queued.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["EXEC"], "*0\\r\\n", who);
        // A runtime error on one engine does not stop the other engines' commands.
        expect(&mut c, &["SET", &k2, "text"], "+OK\\r\\n", who);
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["LPUSH", &k2, "x"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["SET", &k3, "v3"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["INCRBY", &k0, "5"], "+QUEUED\\r\\n", who);
        expect(
            &mut c,
            &["EXEC"],
            "*3\\r\\n-WRONGTYPE Operation against a key holding the wrong kind of value\\r\\n\
             +OK\\r\\n:5\\r\\n",
            who,
        );
        expect(
            &mut c,
            &["MGET", &k0, &k2, &k3],
            "*3\\r\\n$1\\r\\n5\\r\\n$4\\r\\ntext\\r\\n$2\\r\\nv3\\r\\n",
            who,
        );
        expect(&mut c, &["DEL", &k0, &k1, &k2, &k3], ":4\\r\\n", who);
    });
}

#[test]
fn multi_exec_over_engines_resp3() {
    on_redis_and_fleets("tx-resp3", |t| {
        let who = &t.who;
        let [k0, k1, k2, k3] = t.keys4("r3:");
        let (h, s, z) = (t.key("r3h:", 1), t.key("r3s:", 2), t.key("r3z:", 3));
        let mut c = t.connect();
        let hello = c.cmd_str(&["HELLO", "3"]);
        assert!(
            hello.starts_with(b"%"),
            "{who}: HELLO 3 -> {}",
            escape(&hello)
        );
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        for args in [
            vec!["GET", &k0],
            vec!["HSET", &h, "f", "v"],
            vec!["HGETALL", &h],
            vec!["SADD", &s, "m"],
            vec!["SMEMBERS", &s],
            vec!["ZADD", &z, "1.5", "m"],
            vec!["ZSCORE", &z, "m"],
            vec!["MGET", &k0, &k1, &k2, &k3],
            vec!["SET", &k3, "x"],
            vec!["EXISTS", &k0, &k1, &k2, &k3],
        ] {
            expect(&mut c, &args, "+QUEUED\\r\\n", who);
        }
        expect(
            &mut c,
            &["EXEC"],
            "*10\\r\\n_\\r\\n:1\\r\\n%1\\r\\n$1\\r\\nf\\r\\n$1\\r\\nv\\r\\n:1\\r\\n\
             ~1\\r\\n$1\\r\\nm\\r\\n:1\\r\\n,1.5\\r\\n*4\\r\\n_\\r\\n_\\r\\n_\\r\\n_\\r\\n\
             +OK\\r\\n:1\\r\\n",
            who,
        );
        // A WATCH abort is RESP3's null.
        let mut other = t.connect();
        expect(&mut c, &["WATCH", &k0, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k3, "changed"], "+OK\\r\\n", who);
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "no"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["SET", &k1, "no"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], "_\\r\\n", who);
        expect(&mut c, &["MGET", &k0, &k1], "*2\\r\\n_\\r\\n_\\r\\n", who);
        expect(&mut c, &["DEL", &k3, &h, &s, &z], ":4\\r\\n", who);
    });
}

#[test]
fn discard_and_execabort_over_engines() {
    on_redis_and_fleets("tx-abort", |t| {
        let who = &t.who;
        let [k0, k1, k2, k3] = t.keys4("ab:");
        let mut c = t.connect();
        let mut other = t.connect();
        // DISCARD drops every engine's part.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "d"], "+QUEUED\\r\\n", who);
        expect(
            &mut c,
            &["MSET", &k1, "d", &k2, "d", &k3, "d"],
            "+QUEUED\\r\\n",
            who,
        );
        expect(&mut c, &["DISCARD"], "+OK\\r\\n", who);
        expect(&mut c, &["EXISTS", &k0, &k1, &k2, &k3], ":0\\r\\n", who);
        expect(&mut c, &["EXEC"], "-ERR EXEC without MULTI\\r\\n", who);
        expect(
            &mut c,
            &["DISCARD"],
            "-ERR DISCARD without MULTI\\r\\n",
            who,
        );
        // DISCARD drops the WATCHes too: a later change does not fail the next transaction.
        expect(&mut c, &["WATCH", &k0, &k1], "+OK\\r\\n", who);
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k2, "x"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["DISCARD"], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k1, "changed"], "+OK\\r\\n", who);
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "y"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["SET", &k3, "y"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], "*2\\r\\n+OK\\r\\n+OK\\r\\n", who);

        // A queueing error on any engine aborts the whole: nothing runs anywhere.
        expect(
            &mut c,
            &["MSET", &k0, "old", &k1, "old", &k2, "old", &k3, "old"],
            "+OK\\r\\n",
            who,
        );
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["SET", &k1, "new"], "+QUEUED\\r\\n", who);
        expect(
            &mut c,
            &["NOSUCH", &k2],
            &format!("-ERR unknown command 'NOSUCH', with args beginning with: '{k2}' \\r\\n"),
            who,
        );
        expect(&mut c, &["SET", &k3, "new"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], EXECABORT, who);
        expect(
            &mut c,
            &["MGET", &k0, &k1, &k2, &k3],
            "*4\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n",
            who,
        );
        // Wrong arity, on the last engine's command.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["DEL", &k1, &k2], "+QUEUED\\r\\n", who);
        expect(
            &mut c,
            &["INCRBY", &k3],
            "-ERR wrong number of arguments for 'incrby' command\\r\\n",
            who,
        );
        expect(&mut c, &["EXEC"], EXECABORT, who);
        expect(
            &mut c,
            &["MGET", &k0, &k1, &k2, &k3],
            "*4\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n",
            who,
        );
        // The error first, the keyed commands after it: aborted all the same.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(
            &mut c,
            &["GET"],
            "-ERR wrong number of arguments for 'get' command\\r\\n",
            who,
        );
        expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["SET", &k3, "new"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], EXECABORT, who);
        expect(
            &mut c,
            &["MGET", &k0, &k3],
            "*2\\r\\n$3\\r\\nold\\r\\n$3\\r\\nold\\r\\n",
            who,
        );
        // Nested MULTI is refused without aborting.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k0, "n"], "+QUEUED\\r\\n", who);
        expect(
            &mut c,
            &["MULTI"],
            "-ERR MULTI calls can not be nested\\r\\n",
            who,
        );
        expect(&mut c, &["SET", &k2, "n"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], "*2\\r\\n+OK\\r\\n+OK\\r\\n", who);
        expect(&mut c, &["DEL", &k0, &k1, &k2, &k3], ":4\\r\\n", who);
    });
}

#[test]
fn watch_over_engines() {
    on_redis_and_fleets("tx-watch", |t| {
        let who = &t.who;
        let [k0, k1, k2, k3] = t.keys4("w:");
        let mut c = t.connect();
        let mut other = t.connect();
        let exec_two = |c: &mut Resp, a: &str, b: &str, want: &str| {
            expect(c, &["MULTI"], "+OK\\r\\n", who);
            expect(c, &["SET", a, "mine"], "+QUEUED\\r\\n", who);
            expect(c, &["SET", b, "mine"], "+QUEUED\\r\\n", who);
            expect(c, &["EXEC"], want, who);
        };
        const ABORTED: &str = "*-1\\r\\n";
        const RAN: &str = "*2\\r\\n+OK\\r\\n+OK\\r\\n";

        // Changed through the proxy by another client.
        expect(&mut c, &["WATCH", &k0, &k1, &k2], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k1, "theirs"], "+OK\\r\\n", who);
        exec_two(&mut c, &k0, &k2, ABORTED);
        expect(
            &mut c,
            &["MGET", &k0, &k1, &k2],
            "*3\\r\\n$-1\\r\\n$6\\r\\ntheirs\\r\\n$-1\\r\\n",
            who,
        );

        // Changed directly on its engine (a smart client), each engine in turn.
        expect(&mut c, &["DEL", &k1], ":1\\r\\n", who);
        for k in [&k0, &k1, &k2, &k3] {
            expect(&mut c, &["WATCH", &k0, &k1, &k2, &k3], "+OK\\r\\n", who);
            expect(
                &mut t.direct(k),
                &["INCR", k],
                &format!(":{}\\r\\n", 1),
                who,
            );
            exec_two(&mut c, &k0, &k3, ABORTED);
            expect(&mut t.direct(k), &["DEL", k], ":1\\r\\n", who);
        }
        expect(&mut c, &["SET", &k1, "theirs"], "+OK\\r\\n", who);

        // The watched key's engine has no queued command: aborted all the same.
        expect(&mut c, &["WATCH", &k3], "+OK\\r\\n", who);
        expect(&mut t.direct(&k3), &["SET", &k3, "z"], "+OK\\r\\n", who);
        exec_two(&mut c, &k0, &k1, ABORTED);

        // The watcher's own write between WATCH and MULTI aborts too (as in Redis).
        expect(&mut c, &["WATCH", &k0, &k2], "+OK\\r\\n", who);
        expect(&mut c, &["SET", &k2, "self"], "+OK\\r\\n", who);
        exec_two(&mut c, &k0, &k1, ABORTED);

        // A write that does not change anything visible still counts (Redis: any write).
        expect(&mut c, &["WATCH", &k1, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k3, "z"], "+OK\\r\\n", who);
        exec_two(&mut c, &k0, &k2, ABORTED);

        // Unchanged: the transaction runs; EXEC forgets the WATCH.
        expect(&mut c, &["WATCH", &k0, &k1, &k2, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["GET", &k1], "$6\\r\\ntheirs\\r\\n", who);
        exec_two(&mut c, &k0, &k3, RAN);
        expect(&mut other, &["SET", &k0, "later"], "+OK\\r\\n", who);
        exec_two(&mut c, &k0, &k3, RAN);

        // UNWATCH forgets every engine's WATCH.
        expect(&mut c, &["WATCH", &k0, &k1, &k2, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k2, "x"], "+OK\\r\\n", who);
        expect(&mut t.direct(&k1), &["SET", &k1, "x"], "+OK\\r\\n", who);
        expect(&mut c, &["UNWATCH"], "+OK\\r\\n", who);
        exec_two(&mut c, &k1, &k2, RAN);

        // WATCH inside MULTI is refused without aborting; WATCH of a missing key then its
        // creation aborts.
        expect(&mut c, &["WATCH", &k0, "w:missing"], "+OK\\r\\n", who);
        expect(&mut other, &["SET", "w:missing", "1"], "+OK\\r\\n", who);
        expect(&mut c, &["MULTI"], "+OK\\r\\n", who);
        expect(
            &mut c,
            &["WATCH", &k1],
            "-ERR WATCH inside MULTI is not allowed\\r\\n",
            who,
        );
        expect(&mut c, &["SET", &k3, "nope"], "+QUEUED\\r\\n", who);
        expect(&mut c, &["EXEC"], ABORTED, who);
        expect(&mut c, &["GET", &k3], "$4\\r\\nmine\\r\\n", who);

        // Several watchers on different engines' keys: only the one whose key changed aborts.
        let mut d = t.connect();
        expect(&mut c, &["WATCH", &k0, &k1], "+OK\\r\\n", who);
        expect(&mut d, &["WATCH", &k2, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k1, "again"], "+OK\\r\\n", who);
        exec_two(&mut d, &k2, &k3, RAN);
        exec_two(&mut c, &k0, &k3, ABORTED);
        expect(
            &mut c,
            &["DEL", &k0, &k1, &k2, &k3, "w:missing"],
            ":5\\r\\n",
            who,
        );
    });
}

#[test]
fn pipelined_transactions_over_engines() {
    on_redis_and_fleets("tx-pipe", |t| {
        let who = &t.who;
        let [k0, k1, k2, k3] = t.keys4("p:");
        let mut c = t.connect();
        // Two transactions and plain commands in one write.
        let got = pipeline(
            &mut c,
            &[
                &["MULTI"],
                &["SET", &k0, "p"],
                &["INCR", &k1],
                &["GET", &k2],
                &["MGET", &k0, &k1, &k2, &k3],
                &["EXEC"],
                &["GET", &k0],
                &["MULTI"],
                &["INCRBY", &k1, "10"],
                &["DEL", &k0, &k1, &k2, &k3],
                &["EXEC"],
                &["EXISTS", &k0, &k1],
            ],
        );
        assert_eq!(
            got,
            [
                "+OK\\r\\n",
                "+QUEUED\\r\\n",
                "+QUEUED\\r\\n",
                "+QUEUED\\r\\n",
                "+QUEUED\\r\\n",
                "*4\\r\\n+OK\\r\\n:1\\r\\n$-1\\r\\n*4\\r\\n$1\\r\\np\\r\\n$1\\r\\n1\\r\\n$-1\\r\\n$-1\\r\\n",
                "$1\\r\\np\\r\\n",
                "+OK\\r\\n",
                "+QUEUED\\r\\n",
                "+QUEUED\\r\\n",
                "*2\\r\\n:11\\r\\n:2\\r\\n",
                ":0\\r\\n",
            ],
            "{who}"
        );
        // A WATCH aborted, in a pipeline with a queueing error in the next transaction.
        let mut other = t.connect();
        expect(&mut c, &["WATCH", &k0, &k3], "+OK\\r\\n", who);
        expect(&mut other, &["SET", &k3, "x"], "+OK\\r\\n", who);
        let got = pipeline(
            &mut c,
            &[
                &["MULTI"],
                &["SET", &k0, "q"],
                &["SET", &k2, "q"],
                &["EXEC"],
                &["MULTI"],
                &["SET", &k1, "q"],
                &["INCR"],
                &["EXEC"],
                &["MGET", &k0, &k1, &k2, &k3],
            ],
        );
        assert_eq!(
            got,
            [
                "+OK\\r\\n",
                "+QUEUED\\r\\n",
                "+QUEUED\\r\\n",
                "*-1\\r\\n",
                "+OK\\r\\n",
                "+QUEUED\\r\\n",
                "-ERR wrong number of arguments for 'incr' command\\r\\n",
                EXECABORT,
                "*4\\r\\n$-1\\r\\n$-1\\r\\n$-1\\r\\n$1\\r\\nx\\r\\n",
            ],
            "{who}"
        );
        // 50 transactions over all engines in one write.
        expect(&mut c, &["DEL", &k3], ":1\\r\\n", who);
        let mut cmds: Vec<Vec<&str>> = Vec::new();
        for _ in 0..50 {
            cmds.push(vec!["MULTI"]);
            cmds.push(vec!["INCR", &k0]);
            cmds.push(vec!["INCR", &k1]);
            cmds.push(vec!["INCRBY", &k2, "2"]);
            cmds.push(vec!["INCRBY", &k3, "-1"]);
            cmds.push(vec!["EXEC"]);
        }
        let refs: Vec<&[&str]> = cmds.iter().map(Vec::as_slice).collect();
        let got = pipeline(&mut c, &refs);
        for (i, tx) in got.chunks(6).enumerate() {
            let n = i as i64 + 1;
            assert_eq!(
                tx[5],
                format!("*4\\r\\n:{n}\\r\\n:{n}\\r\\n:{}\\r\\n:{}\\r\\n", 2 * n, -n),
                "{who}: transaction {i} of 50"
            );
        }
        expect(
            &mut c,
            &["MGET", &k0, &k1, &k2, &k3],
            "*4\\r\\n$2\\r\\n50\\r\\n$2\\r\\n50\\r\\n$3\\r\\n100\\r\\n$3\\r\\n-50\\r\\n",
            who,
        );
        expect(&mut c, &["DEL", &k0, &k1, &k2, &k3], ":4\\r\\n", who);
    });
}

/// `$<len>\r\n<s>\r\n`, escaped as [`cmd`] returns it.
fn bulk(s: &str) -> String {
    format!("${}\\r\\n{s}\\r\\n", s.len())
}

/// Issue 20's second part (on main since 909eade: "gathered" on one engine, proxy/src/coord.rs
/// `Gather`): multi-key commands and scripts over keys on several engines, each key of a
/// command on another engine where the fleet has enough, compared with redis-server's replies;
/// the same inside MULTI; results read back from their owners directly. (Scripts touching keys
/// they did not declare are not covered: the proxy refuses them today, see the final report.)
#[test]
fn multi_key_commands_across_engines() {
    on_redis_and_fleets("tx-multikey", |t| {
        let who = &t.who;
        let k = |name: &str, e: usize| t.key(&format!("mk:{name}:"), e);
        let mut c = t.connect();
        let gaps = std::cell::RefCell::new(Vec::<String>::new());
        let mut x = |args: &[&str], want: &str| {
            let got = cmd(&mut c, args);
            if got != want {
                gaps.borrow_mut()
                    .push(format!("{args:?}: got {got}, want {want}"));
            }
        };
        let ok = "+OK\\r\\n";
        let (one, zero) = (":1\\r\\n", ":0\\r\\n");

        // Strings: RENAME, RENAMENX, COPY, MSETNX.
        let (s0, s1, s2, s3) = (k("s", 0), k("s", 1), k("s", 2), k("s", 3));
        x(&["SET", &s0, "v"], ok);
        x(&["RENAME", &s0, &s1], ok);
        x(
            &["MGET", &s0, &s1],
            &format!("*2\\r\\n$-1\\r\\n{}", bulk("v")),
        );
        x(&["RENAMENX", &s1, &s2], one);
        x(&["SET", &s3, "x"], ok);
        x(&["RENAMENX", &s2, &s3], zero);
        x(&["COPY", &s2, &s0], one);
        x(&["COPY", &s2, &s3], zero);
        x(&["COPY", &s2, &s3, "REPLACE"], one);
        x(
            &["MGET", &s0, &s1, &s2, &s3],
            &format!("*4\\r\\n{}$-1\\r\\n{}{}", bulk("v"), bulk("v"), bulk("v")),
        );
        let (m0, m1) = (k("m", 0), k("m", 1));
        x(&["MSETNX", &m0, "a", &s0, "b"], zero);
        x(&["MSETNX", &m0, "a", &m1, "b"], one);
        x(
            &["MGET", &m0, &m1, &s0],
            &format!("*3\\r\\n{}{}{}", bulk("a"), bulk("b"), bulk("v")),
        );
        x(&["RENAME", &k("none", 0), &s1], "-ERR no such key\\r\\n");

        // Sets.
        let (t0, t1, t2, t3) = (k("set", 0), k("set", 1), k("set", 2), k("set", 3));
        x(&["SADD", &t0, "a", "b", "c"], ":3\\r\\n");
        x(&["SADD", &t1, "b", "c", "d"], ":3\\r\\n");
        x(&["SMOVE", &t0, &t1, "a"], one);
        x(&["SMOVE", &t0, &t1, "zz"], zero);
        x(&["SINTERSTORE", &t2, &t0, &t1], ":2\\r\\n");
        x(&["SUNIONSTORE", &t3, &t0, &t1], ":4\\r\\n");
        x(&["SDIFFSTORE", &t2, &t1, &t0], ":2\\r\\n");
        x(&["SINTERCARD", "2", &t0, &t1], ":2\\r\\n");
        x(
            &["SORT", &t2, "ALPHA"],
            &format!("*2\\r\\n{}{}", bulk("a"), bulk("d")),
        );
        x(
            &["SORT", &t3, "ALPHA"],
            &format!(
                "*4\\r\\n{}{}{}{}",
                bulk("a"),
                bulk("b"),
                bulk("c"),
                bulk("d")
            ),
        );

        // Lists.
        let (l0, l1, l2) = (k("l", 0), k("l", 1), k("l", 2));
        x(&["RPUSH", &l0, "1", "2", "3"], ":3\\r\\n");
        x(&["LMOVE", &l0, &l1, "LEFT", "RIGHT"], &bulk("1"));
        x(&["RPOPLPUSH", &l0, &l1], &bulk("3"));
        x(
            &["LRANGE", &l1, "0", "-1"],
            &format!("*2\\r\\n{}{}", bulk("3"), bulk("1")),
        );
        x(&["LMOVE", &l0, &l2, "RIGHT", "LEFT"], &bulk("2"));
        x(
            &["LMPOP", "2", &l0, &l1, "LEFT"],
            &format!("*2\\r\\n{}*1\\r\\n{}", bulk(&l1), bulk("3")),
        );
        x(&["RPOP", &l2], &bulk("2"));
        let (n0, n1) = (k("n", 0), k("n", 1));
        x(&["RPUSH", &n0, "3", "1", "2"], ":3\\r\\n");
        x(&["SORT", &n0, "STORE", &n1], ":3\\r\\n");
        x(
            &["LRANGE", &n1, "0", "-1"],
            &format!("*3\\r\\n{}{}{}", bulk("1"), bulk("2"), bulk("3")),
        );

        // Sorted sets.
        let (z0, z1, z2, z3) = (k("z", 0), k("z", 1), k("z", 2), k("z", 3));
        x(&["ZADD", &z0, "1", "a", "2", "b"], ":2\\r\\n");
        x(&["ZADD", &z1, "3", "c", "4", "b"], ":2\\r\\n");
        x(&["ZUNIONSTORE", &z2, "2", &z0, &z1], ":3\\r\\n");
        x(
            &["ZRANGE", &z2, "0", "-1", "WITHSCORES"],
            &format!(
                "*6\\r\\n{}{}{}{}{}{}",
                bulk("a"),
                bulk("1"),
                bulk("c"),
                bulk("3"),
                bulk("b"),
                bulk("6")
            ),
        );
        x(
            &["ZINTERSTORE", &z3, "2", &z0, &z1, "WEIGHTS", "1", "10"],
            one,
        );
        x(&["ZSCORE", &z3, "b"], &bulk("42"));
        x(&["ZDIFFSTORE", &z3, "2", &z2, &z1], one);
        x(&["ZRANGESTORE", &z3, &z2, "0", "1"], ":2\\r\\n");
        x(
            &["ZMPOP", "2", &z0, &z3, "MIN"],
            &format!(
                "*2\\r\\n{}*1\\r\\n*2\\r\\n{}{}",
                bulk(&z0),
                bulk("a"),
                bulk("1")
            ),
        );

        // Bits, HyperLogLog, geo.
        let (b0, b1, b2) = (k("b", 0), k("b", 1), k("b", 2));
        x(&["SET", &b0, "a"], ok);
        x(&["SET", &b1, "c"], ok);
        x(&["BITOP", "OR", &b2, &b0, &b1], one);
        x(&["GET", &b2], &bulk("c"));
        let (h0, h1, h2) = (k("h", 0), k("h", 1), k("h", 2));
        x(&["PFADD", &h0, "a", "b"], one);
        x(&["PFADD", &h1, "b", "c"], one);
        x(&["PFCOUNT", &h0, &h1], ":3\\r\\n");
        x(&["PFMERGE", &h2, &h0, &h1], ok);
        x(&["PFCOUNT", &h2], ":3\\r\\n");
        let (g0, g1) = (k("g", 0), k("g", 1));
        x(
            &[
                "GEOADD",
                &g0,
                "13.361389",
                "38.115556",
                "Palermo",
                "15.087269",
                "37.502669",
                "Catania",
            ],
            ":2\\r\\n",
        );
        x(
            &[
                "GEOSEARCHSTORE",
                &g1,
                &g0,
                "FROMLONLAT",
                "15",
                "37",
                "BYRADIUS",
                "200",
                "km",
                "ASC",
            ],
            ":2\\r\\n",
        );
        x(&["ZCARD", &g1], ":2\\r\\n");

        // Streams: XREAD over two engines' streams.
        let (x0, x1) = (k("x", 0), k("x", 1));
        x(&["XADD", &x0, "1-1", "f", "v"], &bulk("1-1"));
        x(&["XADD", &x1, "2-1", "g", "w"], &bulk("2-1"));
        x(
            &["XREAD", "COUNT", "5", "STREAMS", &x0, &x1, "0", "0"],
            &format!(
                "*2\\r\\n*2\\r\\n{}*1\\r\\n*2\\r\\n{}*2\\r\\n{}{}*2\\r\\n{}*1\\r\\n*2\\r\\n{}*2\\r\\n{}{}",
                bulk(&x0),
                bulk("1-1"),
                bulk("f"),
                bulk("v"),
                bulk(&x1),
                bulk("2-1"),
                bulk("g"),
                bulk("w")
            ),
        );

        // Scripts moving a value between engines: EVAL, then EVALSHA of the same body.
        let body = "local v = redis.call('GET', KEYS[1]) redis.call('DEL', KEYS[1]) \
                    redis.call('SET', KEYS[2], v) return v";
        let (e0, e1) = (k("e", 0), k("e", 1));
        x(&["SET", &e0, "moved"], ok);
        x(&["EVAL", body, "2", &e0, &e1], &bulk("moved"));
        x(
            &["MGET", &e0, &e1],
            &format!("*2\\r\\n$-1\\r\\n{}", bulk("moved")),
        );
        let loaded = cmd(&mut c, &["SCRIPT", "LOAD", body]);
        let sha = loaded
            .trim_start_matches("$40\\r\\n")
            .trim_end_matches("\\r\\n")
            .to_string();
        assert_eq!(sha.len(), 40, "{who}: SCRIPT LOAD -> {loaded}");
        let mut x = |args: &[&str], want: &str| {
            let got = cmd(&mut c, args);
            if got != want {
                gaps.borrow_mut()
                    .push(format!("{args:?}: got {got}, want {want}"));
            }
        };
        x(&["EVALSHA", &sha, "2", &e1, &e0], &bulk("moved"));
        x(
            &["MGET", &e0, &e1],
            &format!("*2\\r\\n{}$-1\\r\\n", bulk("moved")),
        );
        let transfer =
            "redis.call('DECRBY', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[2], ARGV[1])";
        x(
            &["EVAL", transfer, "2", &k("acct", 0), &k("acct", 1), "5"],
            ":5\\r\\n",
        );
        x(
            &["MGET", &k("acct", 0), &k("acct", 1)],
            &format!("*2\\r\\n{}{}", bulk("-5"), bulk("5")),
        );
        x(
            &[
                "EVAL",
                "return redis.call('INCR', KEYS[1])",
                "1",
                &k("acct", 3),
            ],
            one,
        );
        // A script reading a key of another engine it did not declare, before its first write
        // (the proxy runs it again gathered with that key: docs/transactions.md).
        let (ud, u) = (k("ud", 0), k("u", 1));
        x(&["SET", &u, "7"], ok);
        x(
            &[
                "EVAL",
                "local v = redis.call('GET', ARGV[1]) redis.call('SET', KEYS[1], v) return v",
                "1",
                &ud,
                &u,
            ],
            &bulk("7"),
        );
        x(
            &["MGET", &ud, &u],
            &format!("*2\\r\\n{}{}", bulk("7"), bulk("7")),
        );

        // Inside MULTI, mixed with commands of one engine and split ones.
        x(&["MULTI"], ok);
        x(&["RENAME", &m0, &m1], "+QUEUED\\r\\n");
        x(&["SMOVE", &t1, &t0, "d"], "+QUEUED\\r\\n");
        x(&["INCR", &s3], "+QUEUED\\r\\n");
        x(&["MGET", &m0, &m1], "+QUEUED\\r\\n");
        x(
            &["EVAL", transfer, "2", &k("acct", 1), &k("acct", 2), "2"],
            "+QUEUED\\r\\n",
        );
        x(
            &["EXEC"],
            &format!(
                "*5\\r\\n+OK\\r\\n:1\\r\\n-ERR value is not an integer or out of range\\r\\n*2\\r\\n$-1\\r\\n{}:2\\r\\n",
                bulk("a")
            ),
        );
        // Every result sits on its owner.
        let on_owner = |key: &str, args: &[&str], want: &str| {
            let got = cmd(&mut t.direct(key), args);
            if got != want {
                gaps.borrow_mut()
                    .push(format!("on the owner {args:?}: got {got}, want {want}"));
            }
        };
        on_owner(&m1, &["GET", &m1], &bulk("a"));
        on_owner(&t0, &["SISMEMBER", &t0, "d"], one);
        on_owner(&t1, &["SISMEMBER", &t1, "d"], zero);
        on_owner(&k("acct", 1), &["GET", &k("acct", 1)], &bulk("3"));
        on_owner(&k("acct", 2), &["GET", &k("acct", 2)], &bulk("2"));
        on_owner(&n1, &["LLEN", &n1], ":3\\r\\n");
        on_owner(&z2, &["ZSCORE", &z2, "b"], &bulk("6"));
        on_owner(&g1, &["ZCARD", &g1], ":2\\r\\n");
        on_owner(&e0, &["GET", &e0], &bulk("moved"));
        let mut c = t.connect();
        let all: Vec<String> = [
            "s", "m", "set", "l", "n", "z", "b", "h", "g", "x", "e", "acct", "ud", "u",
        ]
        .iter()
        .flat_map(|n| (0..4).map(move |e| (n.to_string(), e)))
        .map(|(n, e)| k(&n, e))
        .collect();
        let mut del = vec!["DEL"];
        del.extend(all.iter().map(String::as_str));
        let deleted = cmd(&mut c, &del);
        assert!(deleted.starts_with(':'), "{who}: {deleted}");
        let gaps = gaps.into_inner();
        assert!(
            gaps.is_empty(),
            "{who}: {} mismatches:\n{}",
            gaps.len(),
            gaps.join("\n")
        );
    });
}

/// The blocking multi-key commands over keys on several engines (gathered, waiting on the
/// source keys' engines: docs/transactions.md), with data already there (they answer at once,
/// as their non-blocking forms), without (a null after the timeout), and woken by a push to
/// another engine's key, compared with redis-server.
#[test]
fn blocking_multi_key_commands_across_engines() {
    on_redis_and_fleets("tx-blocking", |t| {
        let who = &t.who;
        let k = |name: &str, e: usize| t.key(&format!("bk:{name}:"), e);
        let mut c = t.connect();
        let (l0, l1, z0, z1) = (k("l", 0), k("l", 1), k("z", 0), k("z", 1));
        let (e0, e1) = (k("empty", 0), k("empty", 1));
        expect(&mut c, &["RPUSH", &l0, "1", "2", "3"], ":3\\r\\n", who);
        expect(
            &mut c,
            &["BLPOP", &l1, &l0, "1"],
            &format!("*2\\r\\n{}{}", bulk(&l0), bulk("1")),
            who,
        );
        expect(&mut c, &["BRPOPLPUSH", &l0, &l1, "1"], &bulk("3"), who);
        expect(
            &mut c,
            &["BLMOVE", &l0, &l1, "LEFT", "LEFT", "1"],
            &bulk("2"),
            who,
        );
        expect(
            &mut c,
            &["BLMPOP", "1", "2", &l0, &l1, "RIGHT"],
            &format!("*2\\r\\n{}*1\\r\\n{}", bulk(&l1), bulk("3")),
            who,
        );
        expect(&mut c, &["ZADD", &z1, "1", "m"], ":1\\r\\n", who);
        expect(
            &mut c,
            &["BZPOPMIN", &z0, &z1, "1"],
            &format!("*3\\r\\n{}{}{}", bulk(&z1), bulk("m"), bulk("1")),
            who,
        );
        expect(&mut c, &["ZADD", &z0, "2", "n"], ":1\\r\\n", who);
        expect(
            &mut c,
            &["BZMPOP", "1", "2", &z1, &z0, "MIN"],
            &format!(
                "*2\\r\\n{}*1\\r\\n*2\\r\\n{}{}",
                bulk(&z0),
                bulk("n"),
                bulk("2")
            ),
            who,
        );
        // Nothing there: a null after the timeout.
        expect(&mut c, &["BLPOP", &e0, &e1, "0.2"], "*-1\\r\\n", who);
        // Woken by a push to the second engine's key.
        send(&mut c, &["BLMOVE", &e0, &e1, "LEFT", "LEFT", "5"]);
        std::thread::sleep(Duration::from_millis(200));
        expect(&mut t.connect(), &["RPUSH", &e0, "w"], ":1\\r\\n", who);
        assert_eq!(next(&mut c), bulk("w"), "{who}");
        expect(&mut c, &["DEL", &l1, &e1], ":2\\r\\n", who);
    });
}

// ---------------------------------------------------------------------------------------------
// The engines' key locks, on one engine

#[test]
fn txlock_postpones_conflicting_commands_until_unlock() {
    let _serial = serial();
    let port = free_port();
    let _engine = start_engine(port);
    let who = "engine";
    let mut holder = Resp::connect(port);
    let mut blocked = Resp::connect(port);
    let mut free = Resp::connect(port);
    expect(&mut free, &["SET", "k", "old"], "+OK\\r\\n", who);

    // Locked: a reader of the key waits; another key is served at once.
    expect(&mut holder, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut holder, &["SET", "k", "new"], "+QUEUED\\r\\n", who);
    expect(&mut holder, &["TXLOCK", "5000"], ":0\\r\\n", who);
    send(&mut blocked, &["GET", "k"]);
    assert_quiet(&mut blocked, "GET of a locked key");
    expect(&mut free, &["GET", "other"], "$-1\\r\\n", who);
    expect(&mut free, &["SET", "other", "1"], "+OK\\r\\n", who);
    // EXEC then TXUNLOCK: the postponed GET runs after the transaction, seeing its write.
    expect(&mut holder, &["EXEC"], "*1\\r\\n+OK\\r\\n", who);
    assert_quiet(&mut blocked, "GET of a key locked until TXUNLOCK");
    expect(&mut holder, &["TXUNLOCK"], "+OK\\r\\n", who);
    assert_eq!(next(&mut blocked), "$3\\r\\nnew\\r\\n");

    // A lock past its timeout is released; the holder's late EXEC is refused, nothing ran.
    expect(&mut holder, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut holder, &["SET", "k", "late"], "+QUEUED\\r\\n", who);
    expect(&mut holder, &["TXLOCK", "300"], ":0\\r\\n", who);
    let t0 = Instant::now();
    send(&mut blocked, &["SET", "k", "writer"]);
    assert_eq!(next(&mut blocked), "+OK\\r\\n");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "a write to a key locked for 300 ms waited {waited:?}"
    );
    expect(
        &mut holder,
        &["EXEC"],
        "-ERR transaction lock expired before the transaction ran (TXLOCK timeout); send TXUNLOCK\\r\\n",
        who,
    );
    expect(
        &mut holder,
        &["GET", "k"],
        "-ERR transaction lock expired before the transaction ran (TXLOCK timeout); send TXUNLOCK\\r\\n",
        who,
    );
    expect(&mut holder, &["TXUNLOCK"], "+OK\\r\\n", who);
    expect(&mut holder, &["GET", "k"], "$6\\r\\nwriter\\r\\n", who);

    // A holder that disconnects releases its locks (a coordinator that died).
    let mut dying = Resp::connect(port);
    expect(&mut dying, &["WATCH", "k"], "+OK\\r\\n", who);
    expect(&mut dying, &["TXLOCK", "10000"], ":0\\r\\n", who);
    send(&mut blocked, &["DEL", "k"]);
    assert_quiet(&mut blocked, "DEL of a watched and locked key");
    let t0 = Instant::now();
    drop(dying);
    assert_eq!(next(&mut blocked), ":1\\r\\n");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    // Flags: 1 = a watched key changed, 2 = a queueing error.
    expect(&mut holder, &["WATCH", "k"], "+OK\\r\\n", who);
    expect(&mut free, &["SET", "k", "changed"], "+OK\\r\\n", who);
    expect(&mut holder, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut holder, &["SET", "k", "v"], "+QUEUED\\r\\n", who);
    expect(&mut holder, &["TXLOCK", "1000"], ":1\\r\\n", who);
    expect(&mut holder, &["EXEC"], "*-1\\r\\n", who);
    expect(&mut holder, &["TXUNLOCK"], "+OK\\r\\n", who);
    expect(&mut holder, &["MULTI"], "+OK\\r\\n", who);
    assert!(cmd(&mut holder, &["NOSUCH"]).starts_with("-ERR unknown command"));
    expect(&mut holder, &["SET", "k", "v"], "+QUEUED\\r\\n", who);
    expect(&mut holder, &["TXLOCK", "1000"], ":2\\r\\n", who);
    expect(&mut holder, &["EXEC"], EXECABORT, who);
    expect(&mut holder, &["TXUNLOCK"], "+OK\\r\\n", who);
    expect(&mut free, &["GET", "k"], "$7\\r\\nchanged\\r\\n", who);

    // Two holders wanting the same key: the second TXLOCK waits for the first's unlock.
    let mut second = Resp::connect(port);
    expect(&mut holder, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut holder, &["INCR", "n"], "+QUEUED\\r\\n", who);
    expect(&mut holder, &["TXLOCK", "5000"], ":0\\r\\n", who);
    expect(&mut second, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut second, &["INCR", "n"], "+QUEUED\\r\\n", who);
    send(&mut second, &["TXLOCK", "5000"]);
    assert_quiet(&mut second, "TXLOCK of a key another connection holds");
    expect(&mut holder, &["EXEC"], "*1\\r\\n:1\\r\\n", who);
    expect(&mut holder, &["TXUNLOCK"], "+OK\\r\\n", who);
    assert_eq!(next(&mut second), ":0\\r\\n");
    expect(&mut second, &["EXEC"], "*1\\r\\n:2\\r\\n", who);
    expect(&mut second, &["TXUNLOCK"], "+OK\\r\\n", who);
}

// ---------------------------------------------------------------------------------------------
// An engine dying under a transaction, deterministically

/// Kills engine `i` of `fleet` (SIGKILL by pid) and waits (at most 10 s) until the
/// supervisor's new engine answers PING and the proxy routes to it again (a GET of `key`, a
/// key of that engine, answered without error).
fn kill_engine_and_wait(fleet: &Fleet, i: usize, key: &str) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let old = engine_pid(fleet, i).expect("engine pid in state.toml");
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).expect("kill -9");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(engine_pid(fleet, i).is_some_and(|p| p != old) && pings(fleet.engine_ports[i])) {
        assert!(
            Instant::now() < deadline,
            "engine {i} not restarted:\n{}",
            fleet.sup.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Resp::connect(fleet.proxy_port);
    while c.cmd_str(&["GET", key]).starts_with(b"-") {
        assert!(
            Instant::now() < deadline,
            "the proxy does not reach the new engine {i}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What [`exec_or_closed`] returns when the proxy closed the connection instead of answering.
const CLOSED: &str = "(connection closed by the proxy)";

/// One command's reply (escaped), or [`CLOSED`] when the connection was closed instead (EOF
/// or reset); a missing reply (timeout) panics.
fn exec_or_closed(c: &mut Resp, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    use std::io::Write;
    if c.stream.write_all(&Resp::encode(&args)).is_err() {
        return CLOSED.into();
    }
    match c.try_read_frame() {
        Ok(f) => escape(&f),
        Err(e) if e.starts_with("EOF") || e.starts_with("read error") => CLOSED.into(),
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// A transaction queued on two engines whose second engine is SIGKILLed (and restarted)
/// before EXEC: the surviving engine's part does not run, and the client is told at once.
/// A WATCH on a key of an engine that died cannot be checked any more: the EXEC must not
/// commit (the new engine lost the key; committing would be a lost update). Then the
/// client's next transaction over both engines works.
///
/// Issue 20 asks for "a clear error" for the in-flight transaction: its EXEC answers
/// EXECABORT (the instance's unavailable error reached the commands in flight), and the
/// client keeps its connection (`Tx::instance_lost`).
#[test]
fn an_engine_killed_before_exec_runs_nothing() {
    let _serial = serial();
    let fleet = Fleet::start_with("tx-kill", 2, Some("[engine]\nsave_interval = 0\n"), &[]);
    let (k0, k1) = (key_on("kx:", 0, 2), key_on("kx:", 1, 2));
    let mut c = Resp::connect(fleet.proxy_port);
    expect(
        &mut c,
        &["MSET", &k0, "old", &k1, "old"],
        "+OK\\r\\n",
        "setup",
    );

    // Queued on both engines, engine 1 dies and comes back: nothing runs.
    expect(&mut c, &["MULTI"], "+OK\\r\\n", "queued");
    expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", "queued");
    expect(&mut c, &["SET", &k1, "new"], "+QUEUED\\r\\n", "queued");
    kill_engine_and_wait(&fleet, 1, &k1);
    let t0 = Instant::now();
    let exec = exec_or_closed(&mut c, &["EXEC"]);
    assert_eq!(
        exec, "-EXECABORT Transaction discarded because of previous errors.\\r\\n",
        "EXEC after engine 1 died"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "EXEC took {:?}",
        t0.elapsed()
    );
    eprintln!("EXEC after the engine died: {exec}");
    expect(
        &mut c,
        &["GET", &k0],
        "$3\\r\\nold\\r\\n",
        "engine 0's part did not run",
    );
    expect(
        &mut c,
        &["GET", &k1],
        "$-1\\r\\n",
        "engine 1 restarted empty",
    );

    // WATCH on both engines, engine 1 dies and comes back: the EXEC does not commit.
    expect(&mut c, &["SET", &k1, "watched"], "+OK\\r\\n", "watch");
    expect(&mut c, &["WATCH", &k0, &k1], "+OK\\r\\n", "watch");
    kill_engine_and_wait(&fleet, 1, &k1);
    let replies: Vec<String> = [
        &["MULTI"][..],
        &["SET", &k0, "new"],
        &["SET", &k1, "new"],
        &["EXEC"],
    ]
    .iter()
    .map_while(|args| Some(exec_or_closed(&mut c, args)).filter(|r| r != CLOSED))
    .collect();
    eprintln!("WATCH, then its engine died: MULTI SET SET EXEC -> {replies:?}");
    assert_eq!(
        replies.get(3).map(String::as_str),
        Some("-EXECABORT Transaction discarded because of previous errors.\\r\\n"),
        "EXEC after a watched engine died must not commit: {replies:?}"
    );
    expect(
        &mut c,
        &["GET", &k0],
        "$3\\r\\nold\\r\\n",
        "engine 0's part did not run",
    );

    // The client goes on: a transaction over both engines, then one watching both.
    expect(&mut c, &["MULTI"], "+OK\\r\\n", "after");
    expect(&mut c, &["SET", &k0, "a"], "+QUEUED\\r\\n", "after");
    expect(&mut c, &["SET", &k1, "b"], "+QUEUED\\r\\n", "after");
    expect(&mut c, &["EXEC"], "*2\\r\\n+OK\\r\\n+OK\\r\\n", "after");
    expect(&mut c, &["WATCH", &k0, &k1], "+OK\\r\\n", "after");
    expect(&mut c, &["MULTI"], "+OK\\r\\n", "after");
    expect(&mut c, &["INCR", &k0], "+QUEUED\\r\\n", "after");
    expect(
        &mut c,
        &["EXEC"],
        "*1\\r\\n-ERR value is not an integer or out of range\\r\\n",
        "after",
    );
}

/// An engine that is down (killed, not restarted: two engines and a proxy without a
/// supervisor) while a transaction is queued: the command for it gets the proxy's error, the
/// whole transaction is aborted (EXECABORT), and the part already queued on the live engine
/// is discarded there: it never runs, neither now nor inside the client's next transaction.
#[test]
fn a_command_for_a_down_engine_aborts_the_whole_transaction() {
    let _serial = serial();
    let mut cluster = ClusterWithProxy::start();
    let (k0, k1) = (key_on("dn:", 0, 2), key_on("dn:", 1, 2));
    let c0 = key_on("dn:count:", 0, 2);
    let mut c = Resp::connect(cluster.proxy_port);
    expect(
        &mut c,
        &["MSET", &k0, "old", &k1, "old"],
        "+OK\\r\\n",
        "setup",
    );
    cluster.engines[1].kill();
    // The proxy notices (its link to engine 1 drops): wait until engine 1's keys fail fast.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cmd(&mut c, &["GET", &k1]).starts_with("-") {
        assert!(Instant::now() < deadline, "engine 1 still answering");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The refused command last, or followed by another for the live engine.
    for round in 0..4 {
        let who = format!("round {round}");
        expect(&mut c, &["MULTI"], "+OK\\r\\n", &who);
        expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", &who);
        let refused = cmd(&mut c, &["SET", &k1, "new"]);
        assert!(refused.starts_with("-ERR instance 1"), "{who}: {refused}");
        if round % 2 == 1 {
            expect(&mut c, &["SET", &k0, "newer"], "+QUEUED\\r\\n", &who);
        }
        expect(&mut c, &["EXEC"], EXECABORT, &who);
        expect(&mut c, &["GET", &k0], "$3\\r\\nold\\r\\n", &who);
        // The next transaction, on the live engine only, runs just its own commands.
        expect(&mut c, &["MULTI"], "+OK\\r\\n", &who);
        expect(&mut c, &["INCR", &c0], "+QUEUED\\r\\n", &who);
        expect(
            &mut c,
            &["EXEC"],
            &format!("*1\\r\\n:{}\\r\\n", round + 1),
            &who,
        );
        expect(&mut c, &["GET", &k0], "$3\\r\\nold\\r\\n", &who);
    }
    // DISCARD too.
    expect(&mut c, &["MULTI"], "+OK\\r\\n", "discard");
    expect(&mut c, &["SET", &k0, "new"], "+QUEUED\\r\\n", "discard");
    assert!(cmd(&mut c, &["SET", &k1, "new"]).starts_with("-ERR instance 1"));
    expect(&mut c, &["DISCARD"], "+OK\\r\\n", "discard");
    expect(&mut c, &["MULTI"], "+OK\\r\\n", "discard");
    expect(&mut c, &["INCR", &c0], "+QUEUED\\r\\n", "discard");
    expect(&mut c, &["EXEC"], "*1\\r\\n:5\\r\\n", "discard");
    expect(&mut c, &["GET", &k0], "$3\\r\\nold\\r\\n", "discard");
}

// ---------------------------------------------------------------------------------------------
// Bank

const ACCOUNTS: usize = 40;
const INITIAL: i64 = 1000;
const TOTAL: i64 = ACCOUNTS as i64 * INITIAL;
const TRANSFER_CLIENTS: usize = 4;
const READERS: usize = 2;
const CAS_CLIENTS: usize = 3;
/// Longest any one request may take to be answered (also the clients' read timeout,
/// [`READ_TIMEOUT`]): a request not answered by then is a hang.
const OP_BOUND: Duration = READ_TIMEOUT;
/// Per-client bound on the number of operations (the run is bounded by time first).
const MAX_OPS: usize = 200_000;

/// A small deterministic PRNG (xorshift64*), one per client thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// The bank's keys on an `n`-engine fleet: account `i` on engine `i % n`; the CAS counters on
/// engines 0 and n-1; a sentinel on engine n-1 (see [`bank_with_a_killed_engine`]).
#[derive(Clone)]
struct Bank {
    n: usize,
    accounts: Vec<String>,
    cas: [String; 2],
    sentinel: String,
    /// Every other transfer client moves money with a script over both accounts
    /// ([`TRANSFER_SCRIPT`], run gathered on one engine) instead of MULTI.
    scripts: bool,
}

/// A transfer as a script: `EVAL TRANSFER_SCRIPT 2 from to amount` → the new balance of `to`.
const TRANSFER_SCRIPT: &str =
    "redis.call('DECRBY', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[2], ARGV[1])";

impl Bank {
    fn new(n: usize) -> Bank {
        Bank {
            n,
            accounts: (0..ACCOUNTS)
                .map(|i| key_on(&format!("bank:acct:{i}:"), i % n, n))
                .collect(),
            cas: [key_on("bank:cas:a", 0, n), key_on("bank:cas:b", n - 1, n)],
            sentinel: key_on("bank:sentinel", n - 1, n),
            scripts: false,
        }
    }

    fn with_scripts(n: usize) -> Bank {
        Bank {
            scripts: true,
            ..Bank::new(n)
        }
    }

    fn engine_of(&self, account: usize) -> usize {
        account % self.n
    }
}

/// What one request ended as.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// EXEC answered its array: every engine's part ran.
    Committed,
    /// `-ERR transaction partly run …, instance I did not`: every engine but I ran its part.
    Partial(usize),
    /// EXECABORT, a WATCH abort, or another error: nothing ran (the proxy's word for it).
    NotRun(String),
    /// The proxy closed the connection before answering EXEC. The proxy does this when a
    /// dedicated connection holding the client's transaction fails, AFTER the replies of the
    /// requests it already took (proxy/src/dedicated.rs), and reads nothing more: an EXEC that
    /// was not answered was never run. (The ledger checks this reading.)
    Closed(String),
    /// No complete answer within the read timeout: a hang.
    NoAnswer(String),
}

/// Everything the clients of one bank run saw.
#[derive(Default)]
struct Log {
    /// Transfers through the proxy: (from, to, amount, outcome).
    transfers: Vec<(usize, usize, i64, Outcome)>,
    /// Transfers directly on an engine (both accounts there): (from, to, amount, outcome).
    direct: Vec<(usize, usize, i64, Outcome)>,
    /// Successful reads: (sentinel present, sum of the accounts, accounts missing).
    reads: Vec<(bool, i64, usize)>,
    failed_reads: Vec<String>,
    /// CAS rounds: outcome and the values written (a+1, b+1).
    cas: Vec<(Outcome, i64, i64)>,
    cas_conflicts: usize,
    /// The slowest answer any request got.
    slowest: Duration,
}

/// Sends `cmds` in one write and reads one frame per command; the first failure to read ends
/// it (`Err`: what was missing, as an [`Outcome::Closed`] or [`Outcome::NoAnswer`]).
fn pipelined_frames(c: &mut Resp, cmds: &[Vec<String>]) -> Result<Vec<Vec<u8>>, Outcome> {
    let mut out = Vec::new();
    for args in cmds {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        out.extend_from_slice(&Resp::encode(&args));
    }
    use std::io::Write;
    c.stream
        .write_all(&out)
        .map_err(|e| Outcome::Closed(format!("write: {e}")))?;
    let mut frames = Vec::new();
    for _ in cmds {
        match c.try_read_frame() {
            Ok(f) => frames.push(f),
            Err(e) if e.starts_with("EOF") || e.starts_with("read error") => {
                return Err(Outcome::Closed(format!(
                    "after {} replies: {e}",
                    frames.len()
                )));
            }
            Err(e) => {
                return Err(Outcome::NoAnswer(format!(
                    "after {} replies: {e}",
                    frames.len()
                )));
            }
        }
    }
    Ok(frames)
}

/// The outcome of a transaction from its EXEC reply.
fn outcome_of(exec: &[u8], want_items: usize) -> Outcome {
    if exec.starts_with(format!("*{want_items}\r\n").as_bytes()) {
        return Outcome::Committed;
    }
    let text = String::from_utf8_lossy(exec).trim_end().to_string();
    if let Some(rest) = text.strip_prefix("-ERR transaction partly run") {
        // "…, instance I did not: why"
        let i = rest
            .split("instance ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("unparsable partial failure {text:?}"));
        return Outcome::Partial(i);
    }
    Outcome::NotRun(text)
}

fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// One bank run's clients against `proxy` (and `direct_port`, engine `direct_engine`'s port,
/// for the smart client), until `stop` or `duration`. `on_tick` runs on the test thread every
/// 50 ms with the elapsed time (the kill test kills and watches the engine there).
fn run_bank(
    bank: &Bank,
    proxy: u16,
    direct: (usize, u16),
    duration: Duration,
    mut on_tick: impl FnMut(Duration),
) -> Log {
    let log = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut threads = Vec::new();
    let seed0 = std::process::id() as u64 ^ start.elapsed().as_nanos() as u64;
    // Keeps a connection, replaced after a missing answer (its stream is out of step).
    fn reconnect(c: &mut Option<Resp>, port: u16) -> Option<&mut Resp> {
        if c.is_none() {
            *c = Resp::try_connect(port).ok();
        }
        c.as_mut()
    }

    for t in 0..TRANSFER_CLIENTS {
        let (bank, log, stop) = (bank.clone(), log.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed0 + t as u64);
            let mut conn = None;
            let mut local = Vec::new();
            let mut slowest = Duration::ZERO;
            for _ in 0..MAX_OPS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let from = rng.below(ACCOUNTS);
                let mut to = rng.below(ACCOUNTS);
                while bank.engine_of(to) == bank.engine_of(from) {
                    to = rng.below(ACCOUNTS);
                }
                let amount = 1 + rng.below(20) as i64;
                let Some(c) = reconnect(&mut conn, proxy) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let a = amount.to_string();
                let by_script = bank.scripts && t % 2 == 1;
                let cmds = if by_script {
                    vec![vec![
                        "EVAL".to_string(),
                        TRANSFER_SCRIPT.into(),
                        "2".into(),
                        bank.accounts[from].clone(),
                        bank.accounts[to].clone(),
                        a,
                    ]]
                } else {
                    vec![
                        vec!["MULTI".to_string()],
                        vec!["DECRBY".into(), bank.accounts[from].clone(), a.clone()],
                        vec!["INCRBY".into(), bank.accounts[to].clone(), a],
                        vec!["EXEC".into()],
                    ]
                };
                let t0 = Instant::now();
                let res = pipelined_frames(c, &cmds);
                slowest = slowest.max(t0.elapsed());
                let outcome = match res {
                    Ok(frames) if by_script && frames[0].starts_with(b":") => Outcome::Committed,
                    Ok(frames) => outcome_of(frames.last().unwrap(), 2),
                    Err(e) => {
                        conn = None;
                        e
                    }
                };
                local.push((from, to, amount, outcome));
            }
            let mut l = log.lock().unwrap();
            l.transfers.extend(local);
            l.slowest = l.slowest.max(slowest);
        }));
    }

    for t in 0..READERS {
        let (bank, log, stop) = (bank.clone(), log.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let _ = t;
            let mut conn = None;
            let (mut reads, mut failed) = (Vec::new(), Vec::new());
            let mut slowest = Duration::ZERO;
            let mut mget = vec!["MGET".to_string()];
            mget.extend(bank.accounts.iter().cloned());
            mget.push(bank.sentinel.clone());
            let cmds = [vec!["MULTI".to_string()], mget, vec!["EXEC".to_string()]];
            for _ in 0..MAX_OPS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Some(c) = reconnect(&mut conn, proxy) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let t0 = Instant::now();
                let res = pipelined_frames(c, &cmds);
                slowest = slowest.max(t0.elapsed());
                let frames = match res {
                    Ok(f) => f,
                    Err(e) => {
                        conn = None;
                        failed.push(format!("{e:?}"));
                        continue;
                    }
                };
                let exec = parse_value(&frames[2]);
                let Some([Value::Array(values)]) = exec.array() else {
                    failed.push(escape(&frames[2]));
                    continue;
                };
                assert_eq!(values.len(), ACCOUNTS + 1, "MGET reply {values:?}");
                let mut sum = 0;
                let mut missing = 0;
                for v in &values[..ACCOUNTS] {
                    match v {
                        Value::Null => missing += 1,
                        v => sum += int_of(v).unwrap_or_else(|| panic!("balance {v:?}")),
                    }
                }
                reads.push((values[ACCOUNTS] != Value::Null, sum, missing));
            }
            let mut l = log.lock().unwrap();
            l.reads.extend(reads);
            l.failed_reads.extend(failed);
            l.slowest = l.slowest.max(slowest);
        }));
    }

    // The smart client: transfers between two accounts of one engine, on that engine's port.
    {
        let (bank, log, stop) = (bank.clone(), log.clone(), stop.clone());
        let (engine, port) = direct;
        threads.push(std::thread::spawn(move || {
            let mine: Vec<usize> = (0..ACCOUNTS)
                .filter(|&i| bank.engine_of(i) == engine)
                .collect();
            let mut rng = Rng::new(seed0 + 99);
            let mut conn = None;
            let mut local = Vec::new();
            for _ in 0..MAX_OPS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let from = mine[rng.below(mine.len())];
                let mut to = mine[rng.below(mine.len())];
                while to == from {
                    to = mine[rng.below(mine.len())];
                }
                let amount = 1 + rng.below(20) as i64;
                let Some(c) = reconnect(&mut conn, port) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let a = amount.to_string();
                let cmds = [
                    vec!["MULTI".to_string()],
                    vec!["DECRBY".into(), bank.accounts[from].clone(), a.clone()],
                    vec!["INCRBY".into(), bank.accounts[to].clone(), a],
                    vec!["EXEC".into()],
                ];
                let outcome = match pipelined_frames(c, &cmds) {
                    Ok(frames) => outcome_of(&frames[3], 2),
                    Err(e) => {
                        conn = None;
                        e
                    }
                };
                local.push((from, to, amount, outcome));
                // A smart client among many: a tenth of the proxy clients' pace.
                std::thread::sleep(Duration::from_millis(2));
            }
            log.lock().unwrap().direct.extend(local);
        }));
    }

    for t in 0..CAS_CLIENTS {
        let (bank, log, stop) = (bank.clone(), log.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let _ = t;
            let [a, b] = bank.cas.clone();
            let mut conn = None;
            let (mut rounds, mut conflicts) = (Vec::new(), 0);
            let mut slowest = Duration::ZERO;
            for _ in 0..MAX_OPS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Some(c) = reconnect(&mut conn, proxy) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let t0 = Instant::now();
                // WATCH a b; GET a; GET b (answers needed before MULTI: three round trips).
                let read = pipelined_frames(
                    c,
                    &[
                        vec!["WATCH".into(), a.clone(), b.clone()],
                        vec!["GET".into(), a.clone()],
                        vec!["GET".into(), b.clone()],
                    ],
                );
                let (va, vb) = match read {
                    Ok(f) if f[0] == b"+OK\r\n" => {
                        let v = |f: &[u8]| match parse_value(f) {
                            Value::Null => Some(0),
                            v => int_of(&v),
                        };
                        match (v(&f[1]), v(&f[2])) {
                            (Some(x), Some(y)) => (x, y),
                            // An engine down: its key's GET is an error. Try again later.
                            _ => {
                                let _ = pipelined_frames(c, &[vec!["UNWATCH".into()]]);
                                std::thread::sleep(Duration::from_millis(20));
                                continue;
                            }
                        }
                    }
                    Ok(_) => {
                        let _ = pipelined_frames(c, &[vec!["UNWATCH".into()]]);
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    Err(e) => {
                        conn = None;
                        rounds.push((e, 0, 0));
                        continue;
                    }
                };
                let (na, nb) = (va + 1, vb + 1);
                let res = pipelined_frames(
                    c,
                    &[
                        vec!["MULTI".into()],
                        vec!["SET".into(), a.clone(), na.to_string()],
                        vec!["SET".into(), b.clone(), nb.to_string()],
                        vec!["EXEC".into()],
                    ],
                );
                slowest = slowest.max(t0.elapsed());
                match res {
                    Ok(f) if f[3] == b"*-1\r\n" => conflicts += 1,
                    Ok(f) => rounds.push((outcome_of(&f[3], 2), na, nb)),
                    Err(e) => {
                        conn = None;
                        rounds.push((e, na, nb));
                    }
                }
            }
            let mut l = log.lock().unwrap();
            l.cas.extend(rounds);
            l.cas_conflicts += conflicts;
            l.slowest = l.slowest.max(slowest);
        }));
    }

    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(50));
        on_tick(start.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    // Every client stops within one request (each bounded by the read timeout).
    let joined_by = Instant::now() + OP_BOUND * 3 + Duration::from_secs(5);
    for t in threads {
        while !t.is_finished() {
            assert!(Instant::now() < joined_by, "a bank client did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        t.join().expect("a bank client panicked");
    }
    Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap()
}

/// Sets every account to [`INITIAL`] (through the proxy, one MSET), the CAS counters to 0 and
/// the sentinel.
fn seed_bank(bank: &Bank, proxy: u16) {
    let mut c = Resp::connect(proxy);
    let mut args: Vec<&str> = vec!["MSET"];
    let initial = INITIAL.to_string();
    for a in &bank.accounts {
        args.push(a);
        args.push(&initial);
    }
    args.extend([bank.cas[0].as_str(), "0", bank.cas[1].as_str(), "0"]);
    args.extend([bank.sentinel.as_str(), "here"]);
    assert_eq!(c.cmd_str(&args), b"+OK\r\n");
}

/// Every account's balance, read directly from the engine that owns it (`None`: missing).
fn balances_on_engines(bank: &Bank, engines: &[u16]) -> Vec<Option<i64>> {
    let mut conns: Vec<Resp> = engines.iter().map(|&p| Resp::connect(p)).collect();
    bank.accounts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let e = bank.engine_of(i);
            let r = conns[e].cmd_str(&["GET", a]);
            match parse_value(&r) {
                Value::Null => None,
                v => Some(int_of(&v).unwrap_or_else(|| panic!("GET {a} on engine {e}: {v:?}"))),
            }
        })
        .collect()
}

/// The balance every account must have given the ledger: initial plus the amounts of every
/// transfer whose part touching the account ran (committed, or partial with the account's
/// engine not the one that failed).
fn expected_balances(bank: &Bank, log: &Log) -> Vec<i64> {
    let mut want = vec![INITIAL; ACCOUNTS];
    for (from, to, amount, outcome) in log.transfers.iter().chain(&log.direct) {
        let ran = |account: usize| match outcome {
            Outcome::Committed => true,
            Outcome::Partial(failed) => bank.engine_of(account) != *failed,
            _ => false,
        };
        if ran(*from) {
            want[*from] -= amount;
        }
        if ran(*to) {
            want[*to] += amount;
        }
    }
    want
}

/// A short account of a run, printed with the test's output.
fn summary(log: &Log) -> String {
    let count = |v: &[(usize, usize, i64, Outcome)], f: fn(&Outcome) -> bool| {
        v.iter().filter(|t| f(&t.3)).count()
    };
    let mut errors: HashMap<String, usize> = HashMap::new();
    for (_, _, _, o) in log.transfers.iter().chain(&log.direct) {
        if let Outcome::NotRun(e) | Outcome::NoAnswer(e) | Outcome::Closed(e) = o {
            *errors.entry(e.chars().take(90).collect()).or_default() += 1;
        }
    }
    format!(
        "transfers through the proxy: {} committed, {} partial, {} not run, {} connection \
         closed, {} unanswered; direct: {} committed; reads: {} ok, {} failed; CAS: {} ok, {} \
         conflicts, {} failed; slowest answer {:?}; errors: {errors:?}",
        count(&log.transfers, |o| *o == Outcome::Committed),
        count(&log.transfers, |o| matches!(o, Outcome::Partial(_))),
        count(&log.transfers, |o| matches!(o, Outcome::NotRun(_))),
        count(&log.transfers, |o| matches!(o, Outcome::Closed(_))),
        count(&log.transfers, |o| matches!(o, Outcome::NoAnswer(_))),
        count(&log.direct, |o| *o == Outcome::Committed),
        log.reads.len(),
        log.failed_reads.len(),
        log.cas.iter().filter(|c| c.0 == Outcome::Committed).count(),
        log.cas_conflicts,
        log.cas.iter().filter(|c| c.0 != Outcome::Committed).count(),
        log.slowest,
    )
}

/// Every request was answered in time (no client hung).
fn assert_no_hang(log: &Log) {
    let unanswered: Vec<&Outcome> = log
        .transfers
        .iter()
        .chain(&log.direct)
        .map(|t| &t.3)
        .chain(log.cas.iter().map(|c| &c.0))
        .filter(|o| matches!(o, Outcome::NoAnswer(_)))
        .collect();
    assert!(
        unanswered.is_empty(),
        "requests not answered within {OP_BOUND:?}: {unanswered:?}"
    );
    assert!(
        !log.failed_reads.iter().any(|f| f.starts_with("NoAnswer")),
        "reads not answered: {:?}",
        log.failed_reads
    );
    assert!(log.slowest < OP_BOUND, "slowest answer {:?}", log.slowest);
}

/// Values written by successful CAS rounds to counter `which` (0 = a, 1 = b) are distinct
/// (no two successful rounds read the same value: no lost update).
fn assert_cas_values_distinct(log: &Log, which: usize, ran: impl Fn(&Outcome) -> bool) -> usize {
    let mut vals: Vec<i64> = log
        .cas
        .iter()
        .filter(|c| ran(&c.0))
        .map(|c| if which == 0 { c.1 } else { c.2 })
        .collect();
    let n = vals.len();
    vals.sort_unstable();
    vals.dedup();
    assert_eq!(
        vals.len(),
        n,
        "two successful CAS rounds wrote the same value of counter {which}"
    );
    n
}

fn bank_run(bank: Bank) {
    let _serial = serial();
    let n = bank.n;
    let name = if bank.scripts { "bank-scripts" } else { "bank" };
    let fleet = Fleet::start(&format!("{name}-{n}"), n);
    seed_bank(&bank, fleet.proxy_port);
    let log = run_bank(
        &bank,
        fleet.proxy_port,
        (0, fleet.engine_ports[0]),
        Duration::from_secs(4),
        |_| {},
    );
    eprintln!("bank over {n} engines: {}", summary(&log));
    assert_no_hang(&log);

    // Nothing failed: no engine died.
    let not_committed: Vec<_> = log
        .transfers
        .iter()
        .chain(&log.direct)
        .filter(|t| t.3 != Outcome::Committed)
        .collect();
    assert!(not_committed.is_empty(), "{not_committed:?}");
    assert!(log.failed_reads.is_empty(), "{:?}", log.failed_reads);
    assert!(
        log.transfers.len() >= 100 && log.reads.len() >= 20,
        "too little done to mean anything: {}",
        summary(&log)
    );

    // Every read saw every account and the initial total.
    for (i, &(sentinel, sum, missing)) in log.reads.iter().enumerate() {
        assert!(
            sentinel && missing == 0,
            "read {i}: sentinel {sentinel}, {missing} missing"
        );
        assert_eq!(
            sum,
            TOTAL,
            "read {i} of {} summed to {sum}",
            log.reads.len()
        );
    }
    // The exact ledger, on the engines themselves.
    let got = balances_on_engines(&bank, &fleet.engine_ports);
    let want = expected_balances(&bank, &log);
    let got: Vec<i64> = got
        .iter()
        .map(|b| b.expect("every account exists"))
        .collect();
    assert_eq!(
        got, want,
        "balances on the engines vs the ledger of committed transfers"
    );
    assert_eq!(got.iter().sum::<i64>(), TOTAL);

    // The CAS counters: no lost update.
    let ok = assert_cas_values_distinct(&log, 0, |o| *o == Outcome::Committed);
    assert_cas_values_distinct(&log, 1, |o| *o == Outcome::Committed);
    assert!(
        log.cas.iter().all(|c| c.0 == Outcome::Committed),
        "{}",
        summary(&log)
    );
    assert!(ok > 0, "no CAS round succeeded");
    let mut c = Resp::connect(fleet.proxy_port);
    let counters = c.cmd_str(&["MGET", &bank.cas[0], &bank.cas[1]]);
    let want = format!(
        "*2\r\n${len}\r\n{ok}\r\n${len}\r\n{ok}\r\n",
        len = ok.to_string().len()
    );
    assert_eq!(
        escape(&counters),
        escape(want.as_bytes()),
        "CAS counters vs {ok} successes"
    );
}

#[test]
fn bank_over_2_engines() {
    bank_run(Bank::new(2));
}

#[test]
fn bank_over_4_engines() {
    bank_run(Bank::new(4));
}

/// The bank with half the transfer clients moving money by a script over both accounts
/// (`EVAL`, keys on two engines: run gathered on one, proxy/src/coord.rs `Gather`), the other
/// half by MULTI, beside the readers, the smart client and the CAS clients.
#[test]
fn bank_with_scripts_over_4_engines() {
    bank_run(Bank::with_scripts(4));
}

// ---------------------------------------------------------------------------------------------
// Bank with an engine SIGKILLed mid-run

/// The pid of engine `i` per the supervisor's state file.
fn engine_pid(fleet: &Fleet, i: usize) -> Option<u32> {
    let text = std::fs::read_to_string(fleet.dir.join("data/state.toml")).ok()?;
    let t: toml::Table = text.parse().ok()?;
    t.get("children")?.as_array()?.iter().find_map(|c| {
        (c.get("role")?.as_str()? == "engine" && c.get("index")?.as_integer()? == i as i64)
            .then(|| c.get("pid")?.as_integer().map(|p| p as u32))
            .flatten()
    })
}

/// The bank run with engine N-1 SIGKILLed 1.5 s in and restarted by the supervisor, the run
/// going on until 6 s. Persistence is off (`save_interval = 0`), so the killed engine comes
/// back EMPTY: its accounts, its CAS counter and the sentinel are gone.
///
/// What can be asserted, and why:
///
/// - **No hang**: every request through the proxy is answered (a result or an error) within the
///   client's read timeout, during the kill too, and every client stops when told.
/// - **Reads are atomic across the kill.** The readers' MGET includes a sentinel key on the
///   victim engine, written before the run. A read that sees it read the victim before the kill:
///   it must sum to the initial total, as without a kill. A read that does not see it read the
///   new, empty victim: its accounts there count 0 (missing). Every transfer since the restart
///   is atomic again, so all such reads sum to one and the same amount (whatever was lost
///   with the victim and by transfers cut in half at the kill, it is fixed once the new engine
///   serves).
/// - **The exact ledger on the surviving engines.** The killed engine's data is lost (no
///   snapshot), so its accounts are not checked; every other account must hold its initial
///   balance plus exactly the amounts of the transfers whose part on that account's engine
///   ran, as the proxy reported them: an EXEC array (all ran), `-ERR transaction partly run
///   …, instance I did not` (every engine but I ran: the victim died between the locks and
///   its EXEC), any other error (nothing ran: e.g. the engine was down while the transaction
///   was queued, or when its lock was taken). A transfer reported "not run" that ran, or
///   "committed" that did not, breaks the ledger.
/// - **No lost CAS update on the surviving counter** (engine 0): it ends at the number of
///   rounds answered committed or partly run (its engine ran them), each wrote a distinct
///   value. The victim's counter restarted from nothing, so it is not checked.
/// - **No lock outlives the dead engine**: after the run, a transaction over all 40 accounts
///   and a direct GET of every surviving account on its engine are answered within 1 s (a lock
///   left behind would postpone them up to its 10 s timeout).
fn bank_with_a_killed_engine(bank: Bank) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let _serial = serial();
    let n = bank.n;
    let name = if bank.scripts {
        "bank-scripts-kill"
    } else {
        "bank-kill"
    };
    let fleet = Fleet::start_with(
        &format!("{name}-{n}"),
        n,
        Some("[engine]\nsave_interval = 0\n"),
        &[],
    );
    let victim = n - 1;
    seed_bank(&bank, fleet.proxy_port);
    let old_pid = engine_pid(&fleet, victim).expect("victim pid in state.toml");
    let mut killed_at = None;
    let mut back_at = None;
    let log = run_bank(
        &bank,
        fleet.proxy_port,
        (0, fleet.engine_ports[0]),
        Duration::from_secs(6),
        |t| {
            if killed_at.is_none() && t >= Duration::from_millis(1500) {
                kill(Pid::from_raw(old_pid as i32), Signal::SIGKILL).expect("kill -9 the victim");
                killed_at = Some(t);
            }
            if killed_at.is_some()
                && back_at.is_none()
                && engine_pid(&fleet, victim).is_some_and(|p| p != old_pid)
                && pings(fleet.engine_ports[victim])
            {
                back_at = Some(t);
            }
        },
    );
    eprintln!(
        "bank over {n} engines, engine {victim} killed at {killed_at:?}, serving again at \
         {back_at:?}: {}",
        summary(&log)
    );
    let back_at = back_at.unwrap_or_else(|| {
        panic!(
            "engine {victim} not restarted within the run; supervisor log:\n{}",
            fleet.sup.log()
        )
    });
    assert!(
        back_at < Duration::from_millis(4500),
        "restarted late: {back_at:?}"
    );
    assert_no_hang(&log);

    // Reads.
    let before: Vec<_> = log.reads.iter().filter(|r| r.0).collect();
    let after: Vec<_> = log.reads.iter().filter(|r| !r.0).collect();
    assert!(!before.is_empty() && !after.is_empty(), "{}", summary(&log));
    for (i, &&(_, sum, missing)) in before.iter().enumerate() {
        assert_eq!(
            (sum, missing),
            (TOTAL, 0),
            "read {i} of the victim's first life"
        );
    }
    let settled = after[0].1;
    for (i, &&(_, sum, _)) in after.iter().enumerate() {
        assert_eq!(
            sum, settled,
            "read {i} after the restart: every read since sums to the same amount"
        );
    }
    // Transfers were refused while the victim was down, and succeeded before and after.
    let committed = log
        .transfers
        .iter()
        .filter(|t| t.3 == Outcome::Committed)
        .count();
    let refused = log
        .transfers
        .iter()
        .filter(|t| matches!(t.3, Outcome::NotRun(_)))
        .count();
    assert!(committed > 50 && refused > 0, "{}", summary(&log));
    for (_, _, _, o) in &log.transfers {
        if let Outcome::Partial(i) = o {
            assert_eq!(*i, victim, "only the victim may fail to run its part");
        }
    }

    // The exact ledger on the surviving engines.
    let got = balances_on_engines(&bank, &fleet.engine_ports);
    let want = expected_balances(&bank, &log);
    for i in (0..ACCOUNTS).filter(|&i| bank.engine_of(i) != victim) {
        assert_eq!(
            got[i],
            Some(want[i]),
            "account {i} on surviving engine {}: balance vs the ledger",
            bank.engine_of(i)
        );
    }

    // CAS on the surviving counter.
    let ran_on_0 = |o: &Outcome| matches!(o, Outcome::Committed | Outcome::Partial(_));
    let ok = assert_cas_values_distinct(&log, 0, ran_on_0);
    let mut d = Resp::connect(fleet.engine_ports[0]);
    assert_eq!(
        escape(&d.cmd_str(&["GET", &bank.cas[0]])),
        escape(format!("${}\r\n{ok}\r\n", ok.to_string().len()).as_bytes()),
        "surviving CAS counter vs {ok} rounds that ran on its engine"
    );

    // No lock left behind: a transaction over every account, and direct reads, at once.
    let t0 = Instant::now();
    let mut c = Resp::connect(fleet.proxy_port);
    let mut tx = vec![vec!["MULTI".to_string()]];
    for a in &bank.accounts {
        tx.push(vec!["INCRBY".into(), a.clone(), "0".into()]);
    }
    tx.push(vec!["EXEC".into()]);
    let frames = pipelined_frames(&mut c, &tx).expect("a transaction over every account");
    let exec = parse_value(frames.last().unwrap());
    assert_eq!(exec.array().map(<[Value]>::len), Some(ACCOUNTS), "{exec:?}");
    for (i, b) in balances_on_engines(&bank, &fleet.engine_ports)
        .iter()
        .enumerate()
    {
        if bank.engine_of(i) != victim {
            assert_eq!(*b, got[i]);
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn bank_over_2_engines_one_killed() {
    bank_with_a_killed_engine(Bank::new(2));
}

#[test]
fn bank_over_4_engines_one_killed() {
    bank_with_a_killed_engine(Bank::new(4));
}

/// [`bank_with_a_killed_engine`] with half the transfers done by scripts (gathered on one
/// engine, the other engine's account brought there and written back).
#[test]
fn bank_with_scripts_over_4_engines_one_killed() {
    bank_with_a_killed_engine(Bank::with_scripts(4));
}

// ---------------------------------------------------------------------------------------------
// A browser replica following the bank

/// A browser's side of the fan-out protocol (docs/browser-protocol.md) with the replica the
/// wasm module runs (`recached_wasm::Replica`, natively): what tests/tests/fanout.rs's client
/// does, reduced to what this test needs.
struct Browser {
    ws: tungstenite::WebSocket<std::net::TcpStream>,
    replica: recached_wasm::Replica,
    instances: usize,
    /// Per instance: up to date at least once.
    synced: Vec<bool>,
}

impl Browser {
    fn subscribe(port: u16, prefixes: &[&str]) -> Browser {
        let stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the fan-out");
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://127.0.0.1:{port}/ws"
        ))
        .unwrap();
        let (ws, _) = tungstenite::client(req, stream).expect("WebSocket handshake");
        let mut b = Browser {
            ws,
            replica: recached_wasm::Replica::new(),
            instances: 0,
            synced: Vec::new(),
        };
        let sub = serde_json::json!({"type": "subscribe", "prefixes": prefixes});
        b.ws.send(tungstenite::Message::text(sub.to_string()))
            .unwrap();
        b
    }

    /// Applies the next message, if one arrives within the socket's 200 ms: `Ok(false)` if none.
    fn step(&mut self) -> Result<bool, String> {
        let text = match self.ws.read() {
            Ok(tungstenite::Message::Text(t)) => t,
            Ok(tungstenite::Message::Close(c)) => return Err(format!("closed: {c:?}")),
            Ok(_) => return Ok(true),
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(e.to_string()),
        };
        let m: serde_json::Value =
            serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
        let i = m["instance"].as_u64().unwrap_or(0) as usize;
        match m["type"].as_str().unwrap_or("") {
            "hello" => {
                self.instances = m["instances"].as_u64().unwrap() as usize;
                self.synced = vec![false; self.instances];
            }
            "must-refetch" | "flush" => {
                self.replica.drop_instance(i as u32, self.instances as u32);
            }
            "entry" | "keychange" => {
                let args: Vec<Vec<u8>> = m["args"]
                    .as_array()
                    .ok_or("args")?
                    .iter()
                    .map(|a| {
                        a.as_str()
                            .expect("ASCII keys and values")
                            .as_bytes()
                            .to_vec()
                    })
                    .collect();
                let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                self.replica
                    .apply(&argv)
                    .map_err(|e| format!("apply {m}: {e}"))?;
            }
            "up-to-date" => self.synced[i] = true,
            "error" => return Err(format!("fan-out error: {m}")),
            _ => {}
        }
        Ok(true)
    }

    /// Applies messages for `how_long`, or until `done` (checked after each quiet 200 ms).
    fn follow(&mut self, how_long: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let deadline = Instant::now() + how_long;
        while Instant::now() < deadline {
            if !self.step().unwrap_or_else(|e| panic!("browser: {e}")) && done(self) {
                return true;
            }
        }
        false
    }

    fn get(&mut self, key: &str) -> Option<i64> {
        let r = self.replica.read(&[b"GET", key.as_bytes()], 0).to_vec();
        match parse_value(&r) {
            Value::Null => None,
            v => Some(int_of(&v).unwrap_or_else(|| panic!("replica GET {key}: {v:?}"))),
        }
    }
}

/// A browser replica subscribed to `bank:` through the fleet's fan-out (started by
/// `recached start`) before a 3 s bank run over 4 engines converges, after it, to the
/// engines' final values: every account, both CAS counters. (A replica applies each engine's
/// changes in that engine's order, not transactions across engines at once, so only the
/// convergence is asserted, not the totals of its intermediate states.)
#[test]
fn a_browser_replica_converges_after_the_bank_run() {
    let _serial = serial();
    let n = 4;
    let fanout_port = free_port_run(1);
    let fp = fanout_port.to_string();
    let fleet = Fleet::start_with("bank-replica", n, None, &["--fanout-port", &fp]);
    fleet_wait_port(&fleet, fanout_port);
    let bank = Bank::new(n);
    seed_bank(&bank, fleet.proxy_port);
    let mut browser = Browser::subscribe(fanout_port, &["bank:"]);
    assert!(
        browser.follow(Duration::from_secs(15), |b| b.instances == n
            && b.synced.iter().all(|&s| s)),
        "the replica did not catch up with every engine"
    );
    assert_eq!(browser.get(&bank.accounts[0]), Some(INITIAL));

    // The browser follows while the bank runs (on this thread, between the run's ticks: the
    // replica is not Send).
    let log = run_bank(
        &bank,
        fleet.proxy_port,
        (0, fleet.engine_ports[0]),
        Duration::from_secs(3),
        |_| {
            let until = Instant::now() + Duration::from_millis(40);
            while Instant::now() < until
                && browser.step().unwrap_or_else(|e| panic!("browser: {e}"))
            {}
        },
    );
    eprintln!("bank for the replica: {}", summary(&log));
    assert!(log.transfers.len() >= 100, "{}", summary(&log));

    let want = balances_on_engines(&bank, &fleet.engine_ports);
    let mut d0 = Resp::connect(fleet.engine_ports[0]);
    let mut dn = Resp::connect(fleet.engine_ports[n - 1]);
    let cas = [
        int_of(&parse_value(&d0.cmd_str(&["GET", &bank.cas[0]]))),
        int_of(&parse_value(&dn.cmd_str(&["GET", &bank.cas[1]]))),
    ];
    let converged = browser.follow(Duration::from_secs(15), |b| {
        bank.accounts.iter().zip(&want).all(|(a, w)| b.get(a) == *w)
            && b.get(&bank.cas[0]) == cas[0]
            && b.get(&bank.cas[1]) == cas[1]
    });
    let got: Vec<Option<i64>> = bank.accounts.iter().map(|a| browser.get(a)).collect();
    assert!(converged, "replica {got:?}\nengines {want:?}");
    assert_eq!(got.iter().map(|b| b.unwrap()).sum::<i64>(), TOTAL);
}

/// `node <script>` in tests/browser, driving headless Chromium, that talks with the test: its
/// stdout and stderr go to a log file, which [`NodePage::wait_for`] watches for a line; lines
/// go to its stdin. It runs in a process group of its own: dropping it SIGKILLs that group by
/// its id (node, and whatever of its children stayed in it) and reaps node; playwright's
/// Chromium (its own group) exits when node's end of its pipe closes.
struct NodePage {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    log: std::path::PathBuf,
    script: String,
}

impl NodePage {
    fn spawn(dir: &std::path::Path, script: &str, envs: &[(&str, String)]) -> NodePage {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let log = dir.join(format!("{script}.{}.log", std::process::id()));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new("node");
        cmd.current_dir(dir)
            .args(["--no-warnings", script])
            .stdin(Stdio::piped())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn node");
        let stdin = child.stdin.take();
        NodePage {
            child,
            stdin,
            log,
            script: script.into(),
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the script printed `line`; panics with its output if it exited
    /// or ran out of time first.
    fn wait_for(&mut self, line: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.output().lines().any(|l| l == line) {
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited ({s}) before {line:?}:\n{}",
                    self.script,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not print {line:?} within {limit:?}:\n{}",
                self.script,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn send_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to node");
        stdin.flush().unwrap();
    }

    /// Waits (bounded) for the script to exit; its output, or a panic if it failed.
    fn finish(mut self, limit: Duration) -> String {
        self.stdin = None;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let out = self.output();
                assert!(s.success(), "{} failed ({s}):\n{out}", self.script);
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not finish within {limit:?}:\n{}",
                self.script,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for NodePage {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("[{}] log kept at {}", self.script, self.log.display());
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The same as [`a_browser_replica_converges_after_the_bank_run`] with the real browser
/// replica: the wasm module in headless Chromium (tests/browser/bank.test.mjs, playwright-core
/// and Debian's chromium, installed by scripts/test.sh), on the page of a 2-engine fleet's
/// fan-out, subscribed to `bank:`. A 3 s bank run (cross-engine MULTI/EXEC transfers through
/// the proxy, transfers straight on engine 0, CAS over both engines) while the page follows;
/// the run's ledger is checked on the engines. Then the page must (bounded wait) read, locally,
/// every account and both counters as the proxy does, the accounts summing to the total, and
/// it must have applied exactly one keychange per effect the ledger predicts for each key
/// (every committed transfer changes both its accounts; each CAS round both counters), with no
/// resync in between: a transaction's effects missing from an engine's feed (or applied twice)
/// fails it, even where final values happen to agree.
#[test]
fn a_chromium_replica_converges_after_the_bank_run() {
    let _serial = serial();
    let (dir, _wasm) = browser_env(true);
    let n = 2;
    let fanout_port = free_port_run(1);
    let fp = fanout_port.to_string();
    let fleet = Fleet::start_with("bank-chromium", n, None, &["--fanout-port", &fp]);
    fleet_wait_port(&fleet, fanout_port);
    let bank = Bank::new(n);
    seed_bank(&bank, fleet.proxy_port);

    let spec = serde_json::json!({
        "accounts": bank.accounts,
        "engines": (0..ACCOUNTS).map(|i| bank.engine_of(i)).collect::<Vec<_>>(),
        "cas": bank.cas,
        "initial": INITIAL,
        "total": TOTAL,
    });
    let mut page = NodePage::spawn(
        &dir,
        "bank.test.mjs",
        &[
            ("FANOUT_PORT", fanout_port.to_string()),
            ("PROXY_PORT", fleet.proxy_port.to_string()),
            ("BANK", spec.to_string()),
        ],
    );
    page.wait_for("ready", Duration::from_secs(40));

    let log = run_bank(
        &bank,
        fleet.proxy_port,
        (0, fleet.engine_ports[0]),
        Duration::from_secs(3),
        |_| {},
    );
    eprintln!("bank for the Chromium replica: {}", summary(&log));
    assert_no_hang(&log);
    let failed: Vec<_> = log
        .transfers
        .iter()
        .chain(&log.direct)
        .filter(|t| t.3 != Outcome::Committed)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        log.cas.iter().all(|c| c.0 == Outcome::Committed),
        "{}",
        summary(&log)
    );
    assert!(log.transfers.len() >= 100, "{}", summary(&log));
    let got: Vec<i64> = balances_on_engines(&bank, &fleet.engine_ports)
        .into_iter()
        .map(|b| b.expect("every account exists"))
        .collect();
    assert_eq!(got, expected_balances(&bank, &log), "engines vs the ledger");

    // The effects each key had: one per committed transfer it took part in (DECRBY, INCRBY),
    // one per committed CAS round for each counter (SET).
    let mut keychanges: HashMap<&str, u64> = HashMap::new();
    for (from, to, _, _) in log.transfers.iter().chain(&log.direct) {
        *keychanges.entry(&bank.accounts[*from]).or_default() += 1;
        *keychanges.entry(&bank.accounts[*to]).or_default() += 1;
    }
    for key in &bank.cas {
        keychanges.insert(key, log.cas.len() as u64);
    }
    page.send_line(&serde_json::json!({ "keychanges": keychanges }).to_string());
    let out = page.finish(Duration::from_secs(30));
    let ok = out
        .lines()
        .find(|l| l.starts_with("bank replica: OK"))
        .unwrap_or_else(|| panic!("{out}"));
    eprintln!("{ok}");
}

/// Waits (bounded) until the fleet's process on `port` listens.
fn fleet_wait_port(fleet: &Fleet, port: u16) {
    let deadline = Instant::now() + FLEET_START_TIMEOUT;
    while !pings(port) {
        assert!(
            Instant::now() < deadline,
            "nothing answers PING on {port}:\n{}",
            fleet.sup.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two lock holders on one engine, each with a script queued on its own key (what a gathered
/// script, or a transaction holding one, is on its target engine): both EXECs run at once.
/// (Before the fix in engine/core/src/txlock.rs, a holder's queued script waited for every
/// other holder to unlock: each waited for the other until the locks expired.)
#[test]
fn txlock_holders_with_scripts_do_not_wait_for_each_other() {
    let _serial = serial();
    let port = free_port();
    let _engine = start_engine(port);
    let who = "engine";
    let script = "return redis.call('INCR', KEYS[1])";
    let mut a = Resp::connect(port);
    let mut b = Resp::connect(port);
    for (c, key) in [(&mut a, "ka"), (&mut b, "kb")] {
        expect(c, &["MULTI"], "+OK\\r\\n", who);
        expect(c, &["EVAL", script, "1", key], "+QUEUED\\r\\n", who);
        expect(c, &["TXLOCK", "5000"], ":0\\r\\n", who);
    }
    let t0 = Instant::now();
    expect(&mut a, &["EXEC"], "*1\\r\\n:1\\r\\n", who);
    expect(&mut b, &["EXEC"], "*1\\r\\n:1\\r\\n", who);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    expect(&mut a, &["TXUNLOCK"], "+OK\\r\\n", who);
    expect(&mut b, &["TXUNLOCK"], "+OK\\r\\n", who);
    // A script of a connection holding no lock still waits for a holder (its keys are not
    // all known), and runs once the holder unlocks.
    expect(&mut a, &["WATCH", "kc"], "+OK\\r\\n", who);
    expect(&mut a, &["TXLOCK", "5000"], ":0\\r\\n", who);
    send(&mut b, &["EVAL", script, "1", "kd"]);
    assert_quiet(&mut b, "a script while another connection holds a lock");
    expect(&mut a, &["TXUNLOCK"], "+OK\\r\\n", who);
    assert_eq!(next(&mut b), ":1\\r\\n");
    // A holder's script on a key another holder locked waits for that one.
    expect(&mut a, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut a, &["INCR", "ka"], "+QUEUED\\r\\n", who);
    expect(&mut a, &["TXLOCK", "5000"], ":0\\r\\n", who);
    expect(&mut b, &["MULTI"], "+OK\\r\\n", who);
    expect(&mut b, &["EVAL", script, "1", "kb"], "+QUEUED\\r\\n", who);
    expect(&mut b, &["EVAL", script, "1", "ka"], "+QUEUED\\r\\n", who);
    // kb is free, ka is held by a: b's TXLOCK waits for a.
    send(&mut b, &["TXLOCK", "5000"]);
    assert_quiet(&mut b, "TXLOCK of a key another holder locked");
    expect(&mut a, &["EXEC"], "*1\\r\\n:2\\r\\n", who);
    expect(&mut a, &["TXUNLOCK"], "+OK\\r\\n", who);
    assert_eq!(next(&mut b), ":0\\r\\n");
    expect(&mut b, &["EXEC"], "*2\\r\\n:2\\r\\n:3\\r\\n", who);
    expect(&mut b, &["TXUNLOCK"], "+OK\\r\\n", who);
}

/// `TXLOCK … KEYS n key… [DUMP]` (how the proxy locks a gathered unit's keys) waits while
/// another connection holds one of the named keys, then locks it; the lock is released
/// whole. (Before the fix in engine/core/src/txlock.rs the dispatcher checked only the
/// queued and watched keys: a second TXLOCK KEYS took the key from its holder, both went on
/// as if they held it, and the first release left a lock with no holder behind, postponing
/// every later command on the key for good.)
#[test]
fn txlock_keys_waits_for_the_holder_of_a_named_key() {
    let _serial = serial();
    let port = free_port();
    let _engine = start_engine(port);
    let who = "engine";
    let mut a = Resp::connect(port);
    let mut b = Resp::connect(port);
    let mut other = Resp::connect(port);
    expect(&mut other, &["SET", "k", "1"], "+OK\\r\\n", who);
    expect(
        &mut a,
        &["TXLOCK", "5000", "KEYS", "1", "k"],
        ":0\\r\\n",
        who,
    );
    send(&mut b, &["TXLOCK", "5000", "KEYS", "2", "j", "k", "DUMP"]);
    assert_quiet(&mut b, "TXLOCK KEYS of a key another connection holds");
    send(&mut other, &["INCR", "k"]);
    assert_quiet(&mut other, "INCR of a locked key");
    expect(&mut a, &["TXUNLOCK"], "+OK\\r\\n", who);
    // b now holds j and k (and got their payloads); the INCR waits for b.
    let got = next(&mut b);
    assert!(
        got.starts_with("*5\\r\\n:0\\r\\n$-1\\r\\n:-2\\r\\n$"),
        "{got}"
    );
    assert_quiet(&mut other, "INCR of a key locked by the second holder");
    expect(&mut b, &["TXUNLOCK"], "+OK\\r\\n", who);
    assert_eq!(next(&mut other), ":2\\r\\n");
    // Nothing is left locked.
    for (c, want) in [
        (&mut a, ":3\\r\\n"),
        (&mut b, ":4\\r\\n"),
        (&mut other, ":5\\r\\n"),
    ] {
        expect(c, &["INCR", "k"], want, who);
    }
}
