//! The EVAL script cache is not bounded by mlua's handle limit: a Lua table holds the
//! compiled scripts, so tens of thousands of distinct scripts stay cached and runnable (the
//! first-EVAL benchmark, scripts/bench-scripting.sh, compiles ~50,000).

use engine_core::{Client, Config, Engine};

fn run(e: &mut Engine, c: &mut Client, args: &[&str]) -> Vec<u8> {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    e.exec(c, &argv, 1_767_225_600_000_000, &mut out);
    out
}

#[test]
fn twenty_thousand_distinct_scripts_stay_cached_and_run() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let mut c = Client {
        id: 1,
        ..Client::default()
    };
    for i in 0..20_000 {
        let body = format!("return {i}");
        assert_eq!(
            run(&mut e, &mut c, &["EVAL", &body, "0"]),
            format!(":{i}\r\n").into_bytes()
        );
    }
    // The first and a middle one, by SHA.
    for i in [0, 12_345] {
        let body = format!("return {i}");
        let sha = run(&mut e, &mut c, &["SCRIPT", "LOAD", &body]);
        let sha = String::from_utf8_lossy(&sha[5..45]).into_owned();
        assert_eq!(
            run(&mut e, &mut c, &["EVALSHA", &sha, "0"]),
            format!(":{i}\r\n").into_bytes()
        );
    }
    assert_eq!(run(&mut e, &mut c, &["SCRIPT", "FLUSH"]), b"+OK\r\n");
    assert_eq!(
        run(&mut e, &mut c, &["EVAL", "return 'after'", "0"]),
        b"$5\r\nafter\r\n"
    );
}
