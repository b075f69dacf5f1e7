//! `redis.call` on Lua's C API (src/fastcall.rs): replies of every shape arrive whole, also
//! when a finalizer (`__gc` of a `newproxy`, which Redis 7 allows) runs another `redis.call`
//! in the middle of a reply being pushed.

use engine_core::{Client, Config, Engine};

const T0: u64 = 1_767_225_600_000_000;

fn run(e: &mut Engine, c: &mut Client, args: &[&str]) -> Vec<u8> {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    e.exec(c, &argv, T0, &mut out);
    out
}

/// Lua's collector runs `__gc` finalizers during allocations, and pushing a large reply
/// allocates: each finalizer here calls `redis.call` with a reply of its own while an outer
/// call's reply is being pushed. Every outer reply must still be read whole and in order, and
/// every finalizer's call must have run.
#[test]
fn finalizers_calling_redis_during_a_reply_push() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let mut c = Client::default();
    let mut push = vec!["RPUSH", "l"];
    let items: Vec<String> = (1..=1000).map(|i| format!("element-{i:04}")).collect();
    push.extend(items.iter().map(String::as_str));
    assert_eq!(run(&mut e, &mut c, &push), b":1000\r\n");
    let script = r#"
        local total = 0
        for round = 1, 40 do
          for i = 1, 50 do
            local p = newproxy(true)
            getmetatable(p).__gc = function()
              local r = redis.call('lrange', 'l', 0, 9)
              if r[1] ~= 'element-0001' or r[10] ~= 'element-0010' then
                redis.call('set', 'bad', 'inner')
              end
              redis.call('incr', 'finalized')
            end
          end
          local r = redis.call('lrange', 'l', 0, -1)
          for i = 1, 1000 do
            if r[i] ~= string.format('element-%04d', i) then
              return 'outer reply damaged at ' .. i
            end
          end
          total = total + #r
        end
        collectgarbage()
        return total
    "#;
    assert_eq!(run(&mut e, &mut c, &["EVAL", script, "0"]), b":40000\r\n");
    assert_eq!(
        run(&mut e, &mut c, &["GET", "finalized"]),
        b"$4\r\n2000\r\n"
    );
    assert_eq!(run(&mut e, &mut c, &["EXISTS", "bad"]), b":0\r\n");
}

/// Error replies become error tables (`pcall`) or raised errors (`call`) with Redis's texts;
/// nested RESP3 shapes convert as Redis converts them.
#[test]
fn reply_shapes_and_errors() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let mut c = Client::default();
    run(&mut e, &mut c, &["SET", "s", "text"]);
    run(&mut e, &mut c, &["HSET", "h", "f", "v"]);
    let cases: &[(&str, &[u8])] = &[
        (
            "return redis.pcall('incr', 's')['err']",
            b"$43\r\nERR value is not an integer or out of range\r\n",
        ),
        (
            "return redis.call('incr', 's')",
            b"-ERR value is not an integer or out of range script: ",
        ),
        (
            "return redis.pcall('nosuch')['err']",
            b"$44\r\nERR Unknown Redis command called from script\r\n",
        ),
        (
            "return redis.pcall()['err']",
            b"$64\r\nERR Please specify at least one argument for this redis lib call\r\n",
        ),
        (
            "return redis.pcall('get', {})['err']",
            b"$63\r\nERR Lua redis lib command arguments must be strings or integers\r\n",
        ),
        (
            "redis.setresp(3); return redis.call('hgetall', 'h')['map']['f']",
            b"$1\r\nv\r\n",
        ),
        (
            "redis.setresp(3); return redis.call('get', 'none') == nil",
            b":1\r\n",
        ),
        ("return redis.call('get', 'none') == false", b":1\r\n"),
        ("return redis.call('set', 'k', 'v')['ok']", b"$2\r\nOK\r\n"),
    ];
    for (script, want) in cases {
        let got = run(&mut e, &mut c, &["EVAL", script, "0"]);
        assert!(
            got.starts_with(want),
            "{script}: {:?}, want {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        );
    }
}
