//! Databases through `Engine::exec`: SELECT, MOVE, SWAPDB, FLUSHDB/FLUSHALL, active expiry in
//! every database, per-database WATCH, blocking pops and keyspace notifications.

use engine_core::{Client, Config, Delivery, Engine, Flow};

/// 2026-01-01T00:00:00Z in µs.
const T0: u64 = 1_767_225_600_000_000;

fn engine() -> Engine {
    Engine::new(Config {
        hash_seed: 42,
        ..Config::default()
    })
}

fn client(id: u64) -> Client {
    Client {
        id,
        created_us: T0,
        ..Client::default()
    }
}

fn run(e: &mut Engine, c: &mut Client, now_us: u64, line: &str) -> (String, Flow) {
    let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let mut out = Vec::new();
    let flow = e.exec(c, &argv, now_us, &mut out);
    (String::from_utf8_lossy(&out).into_owned(), flow)
}

fn cmd(e: &mut Engine, c: &mut Client, line: &str) -> String {
    run(e, c, T0, line).0
}

#[test]
fn select_keeps_keys_apart_and_move_swapdb_flush() {
    let mut e = engine();
    let mut c = client(1);
    assert_eq!(cmd(&mut e, &mut c, "SET k zero"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 15"), "+OK\r\n");
    assert_eq!(c.db, 15);
    assert_eq!(cmd(&mut e, &mut c, "GET k"), "$-1\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SET k fifteen"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "DBSIZE"), ":1\r\n");
    assert_eq!(
        cmd(&mut e, &mut c, "SELECT 16"),
        "-ERR DB index is out of range\r\n"
    );
    // Between commands the last database used stays in the keyspace; views by index do not care.
    assert_eq!(e.current_db(), 15);
    assert_eq!(e.dbsize(), 1);
    // MOVE: refused when the key exists there, then moved with its TTL.
    assert_eq!(cmd(&mut e, &mut c, "MOVE k 0"), ":0\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SET t v PX 5000"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "MOVE t 2"), ":1\r\n");
    assert_eq!(cmd(&mut e, &mut c, "EXISTS t"), ":0\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 2"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "PTTL t"), ":5000\r\n");
    // SWAPDB 2 0: the client on 2 now sees database 0's old data.
    assert_eq!(cmd(&mut e, &mut c, "SWAPDB 2 0"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "GET k"), "$4\r\nzero\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 0"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "PTTL t"), ":5000\r\n");
    assert_eq!(e.expires_count(), 1);
    // FLUSHDB empties the selected database only; FLUSHALL all of them.
    assert_eq!(cmd(&mut e, &mut c, "FLUSHDB"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "DBSIZE"), ":0\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 15"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "DBSIZE"), ":1\r\n");
    assert_eq!(cmd(&mut e, &mut c, "FLUSHALL"), "+OK\r\n");
    for db in 0..16 {
        assert_eq!(cmd(&mut e, &mut c, &format!("SELECT {db}")), "+OK\r\n");
        assert_eq!(cmd(&mut e, &mut c, "DBSIZE"), ":0\r\n", "db {db}");
    }
    assert_eq!(e.dataset_bytes(), 0);
    // RESET goes back to database 0.
    assert_eq!(cmd(&mut e, &mut c, "RESET"), "+RESET\r\n");
    assert_eq!(c.db, 0);
}

#[test]
fn active_expiry_runs_in_every_database() {
    let mut e = engine();
    let mut c = client(1);
    for db in [0, 3, 15] {
        cmd(&mut e, &mut c, &format!("SELECT {db}"));
        for i in 0..20 {
            cmd(&mut e, &mut c, &format!("SET k{i} v PX 100"));
        }
    }
    assert_eq!(e.expires_count(), 60);
    let mut now = T0;
    for _ in 0..50 {
        now += 100_000;
        e.cron(now);
    }
    assert_eq!(e.expires_count(), 0);
    assert_eq!(e.dataset_bytes(), 0);
    assert_eq!(e.current_db(), 15, "cron puts back the database in use");
}

#[test]
fn watch_is_per_database() {
    let mut e = engine();
    let (mut a, mut b) = (client(1), client(2));
    cmd(&mut e, &mut a, "SELECT 1");
    assert_eq!(cmd(&mut e, &mut a, "WATCH k"), "+OK\r\n");
    // The same key in database 0 is another key.
    cmd(&mut e, &mut b, "SET k 0");
    cmd(&mut e, &mut a, "MULTI");
    cmd(&mut e, &mut a, "GET k");
    assert_eq!(cmd(&mut e, &mut a, "EXEC"), "*1\r\n$-1\r\n");
    // In database 1 it is the watched key.
    cmd(&mut e, &mut a, "WATCH k");
    cmd(&mut e, &mut b, "SELECT 1");
    cmd(&mut e, &mut b, "SET k 1");
    cmd(&mut e, &mut a, "MULTI");
    cmd(&mut e, &mut a, "GET k");
    assert_eq!(cmd(&mut e, &mut a, "EXEC"), "*-1\r\n");
    // SWAPDB touches the watched keys present in either database.
    cmd(&mut e, &mut a, "WATCH k");
    cmd(&mut e, &mut b, "SWAPDB 1 5");
    cmd(&mut e, &mut a, "MULTI");
    assert_eq!(cmd(&mut e, &mut a, "EXEC"), "*-1\r\n");
}

#[test]
fn blocking_pops_are_per_database() {
    let mut e = engine();
    let (mut a, mut b) = (client(1), client(2));
    cmd(&mut e, &mut a, "SELECT 4");
    let (out, flow) = run(&mut e, &mut a, T0, "BLPOP q 0");
    assert_eq!((out.as_str(), flow), ("", Flow::Block));
    // A push into database 0 does not wake it.
    cmd(&mut e, &mut b, "RPUSH q x");
    let mut got: Vec<Delivery> = Vec::new();
    e.take_deliveries(&mut got);
    assert!(got.is_empty());
    // MOVE into database 4 does.
    assert_eq!(cmd(&mut e, &mut b, "MOVE q 4"), ":1\r\n");
    e.take_deliveries(&mut got);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].client_id, 1);
    assert_eq!(got[0].bytes, b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
    assert_eq!(cmd(&mut e, &mut b, "SELECT 4"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut b, "EXISTS q"), ":0\r\n");
}

#[test]
fn keyspace_notifications_name_the_database() {
    let mut e = engine();
    let (mut sub, mut w) = (client(1), client(2));
    cmd(&mut e, &mut w, "CONFIG SET notify-keyspace-events KEg$");
    cmd(&mut e, &mut sub, "PSUBSCRIBE __key*@*__:*");
    cmd(&mut e, &mut w, "SELECT 9");
    cmd(&mut e, &mut w, "SET k v");
    cmd(&mut e, &mut w, "MOVE k 2");
    let mut got: Vec<Delivery> = Vec::new();
    e.take_deliveries(&mut got);
    let text: String = got
        .iter()
        .map(|d| String::from_utf8_lossy(&d.bytes).into_owned())
        .collect();
    for chan in [
        "__keyspace@9__:k\r\n$3\r\nset",
        "__keyevent@9__:set\r\n",
        "__keyspace@9__:k\r\n$9\r\nmove_from",
        "__keyspace@2__:k\r\n$7\r\nmove_to",
        "__keyevent@2__:move_to\r\n",
    ] {
        assert!(text.contains(chan), "{chan:?} in {text:?}");
    }
}

/// Redis 7.0 refuses SELECT ≠ 0, MOVE, SWAPDB and COPY … DB in cluster mode; recached's
/// engines serve every database there, as Valkey 9 does (docs/cluster.md "Databases"): the
/// proxy reaches databases 1.. over cluster engines, and smart clients may SELECT too. Slot
/// ownership is the same in every database.
#[test]
fn databases_work_in_cluster_mode() {
    let mut e = Engine::new(Config {
        hash_seed: 42,
        cluster_nodes: vec!["127.0.0.1:7000".into(), "127.0.0.1:7001".into()],
        cluster_index: 0,
        ..Config::default()
    });
    let mut c = client(1);
    // A key this engine owns.
    let key = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| cmd(&mut e, &mut c, &format!("GET {k}")) == "$-1\r\n")
        .expect("some key is owned here");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 1"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, &format!("SET {key} one")), "+OK\r\n");
    assert_eq!(
        cmd(&mut e, &mut c, &format!("COPY {key} {key} DB 2")),
        ":1\r\n"
    );
    assert_eq!(cmd(&mut e, &mut c, &format!("MOVE {key} 3")), ":1\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SWAPDB 3 0"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 0"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, &format!("GET {key}")), "$3\r\none\r\n");
    assert_eq!(
        cmd(&mut e, &mut c, "SELECT 16"),
        "-ERR DB index is out of range\r\n"
    );
    // Keys of another engine's slots are redirected in every database.
    let theirs = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| cmd(&mut e, &mut c, &format!("GET {k}")).starts_with("-MOVED"))
        .expect("some key is owned elsewhere");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 2"), "+OK\r\n");
    assert!(cmd(&mut e, &mut c, &format!("SET {theirs} x")).starts_with("-MOVED "));
}

#[test]
fn eviction_takes_keys_from_every_database() {
    for policy in [
        "allkeys-lru",
        "allkeys-random",
        "volatile-ttl",
        "allkeys-lfu",
    ] {
        // The policy from the start: keys stamped under LRU are not meant to be read as LFU.
        let mut e = Engine::new(Config {
            hash_seed: 42,
            maxmemory_policy: policy,
            ..Config::default()
        });
        let mut c = client(1);
        let value = "v".repeat(100);
        for db in [3, 9] {
            cmd(&mut e, &mut c, &format!("SELECT {db}"));
            for i in 0..200 {
                cmd(&mut e, &mut c, &format!("SET k{i} {value} EX 1000"));
            }
        }
        cmd(&mut e, &mut c, "SELECT 0");
        let before = e.dataset_bytes();
        let limit = 870_000 + before / 2;
        cmd(&mut e, &mut c, &format!("CONFIG SET maxmemory {limit}"));
        for i in 0..20 {
            assert_eq!(cmd(&mut e, &mut c, &format!("SET n{i} 1")), "+OK\r\n");
        }
        e.cron(T0 + 100_000);
        assert!(870_000 + e.dataset_bytes() <= limit, "{policy}");
        assert!(e.db(3).len() < 200 && e.db(9).len() < 200, "{policy}");
        assert_eq!(e.current_db(), 0);
    }
}

/// The feed carries every database (docs/feed.md, *Databases*): database 0's effects in the
/// frames they always had, the others' as `["effect-db", seq, db, …]`.
#[test]
fn the_feed_tags_every_database() {
    let mut e = engine();
    let (mut f, mut w) = (client(99), client(2));
    cmd(&mut e, &mut f, "FEED SUBSCRIBE");
    let mut got: Vec<Delivery> = Vec::new();
    e.take_deliveries(&mut got);
    got.clear();
    let effects = |e: &mut Engine| -> String {
        let mut got: Vec<Delivery> = Vec::new();
        e.take_deliveries(&mut got);
        got.iter()
            .filter(|d| d.client_id == 99)
            .map(|d| String::from_utf8_lossy(&d.bytes).replace("\r\n", " "))
            .collect()
    };
    cmd(&mut e, &mut w, "SET a 0");
    assert_eq!(effects(&mut e), "*5 $6 effect $1 1 $3 SET $1 a $1 0 ");
    cmd(&mut e, &mut w, "SELECT 1");
    cmd(&mut e, &mut w, "SET b 1");
    cmd(&mut e, &mut w, "RPUSH l x");
    cmd(&mut e, &mut w, "FLUSHDB");
    assert_eq!(
        effects(&mut e),
        "*6 $9 effect-db $1 2 $1 1 $3 SET $1 b $1 1 \
         *6 $9 effect-db $1 3 $1 1 $5 RPUSH $1 l $1 x \
         *4 $9 effect-db $1 4 $1 1 $8 FLUSHALL ",
        "database 1's effects, tagged"
    );
    // MOVE into database 0: DEL in database 1, the key's new state in database 0.
    cmd(&mut e, &mut w, "SET m 5");
    effects(&mut e);
    assert_eq!(cmd(&mut e, &mut w, "MOVE m 0"), ":1\r\n");
    let fx = effects(&mut e);
    assert_eq!(
        fx,
        "*5 $9 effect-db $1 6 $1 1 $3 DEL $1 m \
         *4 $6 effect $1 7 $3 DEL $1 m \
         *5 $6 effect $1 8 $3 SET $1 m $1 5 "
    );
    // MOVE out of database 0 deletes it there.
    cmd(&mut e, &mut w, "SELECT 0");
    assert_eq!(cmd(&mut e, &mut w, "MOVE a 3"), ":1\r\n");
    let fx = effects(&mut e);
    assert!(fx.starts_with("*4 $6 effect $1 9 $3 DEL $1 a "), "{fx}");
    assert!(fx.contains("effect-db $2 11 $1 3 $3 SET $1 a $1 0"), "{fx}");
    // SWAPDB with database 0: both start over from their new content.
    cmd(&mut e, &mut w, "SELECT 3");
    assert_eq!(cmd(&mut e, &mut w, "SWAPDB 3 0"), "+OK\r\n");
    let fx = effects(&mut e);
    assert_eq!(
        fx,
        "*4 $9 effect-db $2 12 $1 3 $8 FLUSHALL \
         *5 $9 effect-db $2 13 $1 3 $3 DEL $1 m \
         *6 $9 effect-db $2 14 $1 3 $3 SET $1 m $1 5 \
         *3 $6 effect $2 15 $8 FLUSHALL \
         *4 $6 effect $2 16 $3 DEL $1 a \
         *5 $6 effect $2 17 $3 SET $1 a $1 0 "
    );
}

/// Regression (a CI fuzz run of `fuzz/fuzz_targets/snapshot.rs`): the load statistics count
/// the keys of every database, not only the selected one, and a snapshot written from a
/// loaded file loads again with the same keys in the same databases.
#[test]
fn snapshot_load_counts_keys_of_every_database() {
    use engine_core::snapshot;
    let mut e = engine();
    let mut c = client(1);
    assert_eq!(cmd(&mut e, &mut c, "SET a 0"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 3"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SET b 3"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SELECT 15"), "+OK\r\n");
    assert_eq!(cmd(&mut e, &mut c, "SADD s x y"), ":2\r\n");
    let now_ms = T0 / 1000;
    let mut file = Vec::new();
    assert_eq!(snapshot::write(&e, now_ms, &mut file).unwrap().keys, 3);
    let mut loaded = engine();
    let stats = snapshot::load(&mut loaded, now_ms, file.as_slice()).unwrap();
    assert_eq!(stats.keys, 3);
    assert_eq!(loaded.dbsize(), 1, "database 0 is selected after a load");
    let per_db: Vec<usize> = (0..loaded.databases())
        .map(|n| loaded.db(n).len())
        .collect();
    assert_eq!(&per_db[..4], &[1, 0, 0, 1]);
    assert_eq!(per_db[15], 1);
    let mut again = Vec::new();
    assert_eq!(
        snapshot::write(&loaded, now_ms, &mut again).unwrap().keys,
        3
    );
    let mut c2 = client(2);
    assert_eq!(cmd(&mut loaded, &mut c2, "SELECT 3"), "+OK\r\n");
    assert_eq!(cmd(&mut loaded, &mut c2, "GET b"), "$1\r\n3\r\n");
}
