//! FUNCTION libraries survive a snapshot: written as their code, loaded back through the
//! script host on start (engine-core's `functions` item, snapshot.rs).

use engine_core::{Client, Config, Engine, snapshot};

const T0: u64 = 1_767_225_600_000_000;
const NOW_MS: u64 = T0 / 1000;

fn engine() -> Engine {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    e
}

fn run(e: &mut Engine, args: &[&[u8]]) -> Vec<u8> {
    let mut c = Client {
        id: 1,
        ..Client::default()
    };
    let mut out = Vec::new();
    e.exec(&mut c, args, T0, &mut out);
    out
}

const LIB_A: &[u8] = b"#!lua name=liba\n\
    redis.register_function('hello', function(keys, args) return 'hi ' .. args[1] end)\n\
    redis.register_function{function_name='ro_get', callback=function(keys) \
    return redis.call('get', keys[1]) end, flags={'no-writes'}}";
const LIB_B: &[u8] = b"#!lua name=libb\n\
    local function enc(keys, args) return cjson.encode({k = keys[1], n = #args}) end\n\
    redis.register_function('enc', enc)";

#[test]
fn libraries_round_trip_through_a_snapshot() {
    let mut e = engine();
    assert_eq!(
        run(&mut e, &[b"FUNCTION", b"LOAD", LIB_A]),
        b"$4\r\nliba\r\n"
    );
    assert_eq!(
        run(&mut e, &[b"FUNCTION", b"LOAD", LIB_B]),
        b"$4\r\nlibb\r\n"
    );
    run(&mut e, &[b"SET", b"k", b"v"]);
    let list = run(&mut e, &[b"FUNCTION", b"LIST", b"WITHCODE"]);
    let dump = run(&mut e, &[b"FUNCTION", b"DUMP"]);

    let mut file = Vec::new();
    let written = snapshot::write(&e, NOW_MS, &mut file).unwrap();
    assert_eq!(written.keys, 1);

    let mut loaded = engine();
    let stats = snapshot::load(&mut loaded, NOW_MS, file.as_slice()).unwrap();
    assert_eq!(stats.keys, 1);
    assert_eq!(run(&mut loaded, &[b"FUNCTION", b"LIST", b"WITHCODE"]), list);
    assert_eq!(run(&mut loaded, &[b"FUNCTION", b"DUMP"]), dump);
    assert_eq!(
        run(&mut loaded, &[b"FCALL", b"hello", b"0", b"there"]),
        b"$8\r\nhi there\r\n"
    );
    assert_eq!(
        run(&mut loaded, &[b"FCALL_RO", b"ro_get", b"1", b"k"]),
        b"$1\r\nv\r\n"
    );
    assert_eq!(
        run(&mut loaded, &[b"FCALL", b"enc", b"1", b"x", b"a", b"b"]),
        b"$15\r\n{\"k\":\"x\",\"n\":2}\r\n"
    );

    // Written again, the same bytes (but the creation time, which is the same here).
    let mut again = Vec::new();
    snapshot::write(&loaded, NOW_MS, &mut again).unwrap();
    assert_eq!(again, file);
}

#[test]
fn no_libraries_no_functions_item() {
    let mut e = engine();
    run(&mut e, &[b"SET", b"k", b"v"]);
    let mut with_host = Vec::new();
    snapshot::write(&e, NOW_MS, &mut with_host).unwrap();
    // The same keyspace without a script host writes the same file.
    let mut bare = Engine::new(Config::default());
    let mut c = Client::default();
    bare.exec(&mut c, &[b"SET", b"k", b"v"], T0, &mut Vec::new());
    let mut without = Vec::new();
    snapshot::write(&bare, NOW_MS, &mut without).unwrap();
    assert_eq!(with_host, without);
}

#[test]
fn libraries_need_a_host_to_load() {
    let mut e = engine();
    run(&mut e, &[b"FUNCTION", b"LOAD", LIB_A]);
    let mut file = Vec::new();
    snapshot::write(&e, NOW_MS, &mut file).unwrap();
    let mut bare = Engine::new(Config::default());
    let err = snapshot::load(&mut bare, NOW_MS, file.as_slice()).unwrap_err();
    assert!(err.reason.contains("function libraries"), "{err}");
    assert!(bare.db(0).is_empty());
}

#[test]
fn a_library_that_fails_to_load_fails_the_snapshot() {
    let mut e = engine();
    run(&mut e, &[b"FUNCTION", b"LOAD", LIB_A]);
    let mut file = Vec::new();
    snapshot::write(&e, NOW_MS, &mut file).unwrap();
    // A host that already has `liba` refuses the snapshot's (start-up loads into an empty one).
    let mut busy = engine();
    run(&mut busy, &[b"FUNCTION", b"LOAD", LIB_A]);
    let err = snapshot::load(&mut busy, NOW_MS, file.as_slice()).unwrap_err();
    assert!(err.reason.contains("already exists"), "{err}");
}
