//! The `cjson` library (src/cjson.rs) on its own Lua state: encodings, decodings, errors and
//! settings, as lua_cjson.c gives them in Redis 7.0 (tests/diff/scripting_libs.txt compares
//! the same and more against redis-server).

use mlua::{Function, Lua};
use recached_script::{cjson::table, clib};

fn lua() -> Lua {
    let lua = Lua::new();
    let next: Function = lua.globals().get("next").unwrap();
    lua.globals()
        .set("cjson", table(&lua, &next).unwrap())
        .unwrap();
    lua
}

fn eval(lua: &Lua, code: &str) -> String {
    match lua.load(code).set_name("=t").eval::<mlua::LuaString>() {
        Ok(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        Err(e) => match clib::lib_error_text(&e) {
            Some(t) => format!("error: {}", String::from_utf8_lossy(t)),
            None => format!("other error: {e}"),
        },
    }
}

#[test]
fn encode_values() {
    let lua = lua();
    let cases = [
        ("cjson.encode({})", "{}"),
        ("cjson.encode({1,2,3})", "[1,2,3]"),
        ("cjson.encode({1,nil,3})", "[1,null,3]"),
        ("cjson.encode(0.1)", "0.1"),
        ("cjson.encode(1/3)", "0.33333333333333"),
        ("cjson.encode(123456789012345)", "1.2345678901234e+14"),
        ("cjson.encode(-0)", "-0"),
        (
            "cjson.encode('a/\"\\\\\\1\\127é')",
            "\"a\\/\\\"\\\\\\u0001\\u007fé\"",
        ),
        (
            "cjson.encode({[1]=1,[2]=2,[10]=3})",
            "[1,2,null,null,null,null,null,null,null,3]",
        ),
        ("cjson.encode({[1.5]=1})", "{\"1.5\":1}"),
        ("cjson.encode(cjson.null)", "null"),
        (
            "cjson.encode({a={b={c=true}}})",
            "{\"a\":{\"b\":{\"c\":true}}}",
        ),
        (
            "cjson.encode({[1]=1,[20]=2})",
            "error: Cannot serialise table: excessively sparse array",
        ),
        (
            "cjson.encode(1/0)",
            "error: Cannot serialise number: must not be NaN or Inf",
        ),
        (
            "cjson.encode(print)",
            "error: Cannot serialise function: type not supported",
        ),
        (
            "cjson.encode({[true]=1})",
            "error: Cannot serialise boolean: table key must be a number or string",
        ),
        (
            "cjson.encode()",
            "error: bad argument #1 to 'encode' (expected 1 argument)",
        ),
        (
            "local t = {} t[1] = t return cjson.encode(t)",
            "error: Cannot serialise, excessive nesting (1001)",
        ),
    ];
    for (code, want) in cases {
        let code = if code.contains("return") {
            code.to_string()
        } else {
            format!("return {code}")
        };
        let got = eval(&lua, &code);
        let got = got.replacen("error: t:1: ", "error: ", 1);
        assert_eq!(got, want, "{code}");
    }
}

#[test]
fn decode_values() {
    let lua = lua();
    let rt = |json: &str| {
        eval(
            &lua,
            &format!("return cjson.encode(cjson.decode({json:?}))"),
        )
    };
    assert_eq!(rt("[1,2,3]"), "[1,2,3]");
    assert_eq!(
        rt(" {\"a\" : [true,false,null]} "),
        "{\"a\":[true,false,null]}"
    );
    assert_eq!(rt("\"\\u00e9\\ud83d\\ude00\\n\""), "\"é😀\\n\"");
    assert_eq!(rt("0x10"), "16");
    assert_eq!(rt("-1.5e3"), "-1500");
    assert_eq!(rt("[1]\u{0}garbage"), "[1]");
    let err = |json: &str| eval(&lua, &format!("return cjson.decode({json:?})"));
    assert!(err("[1,]").ends_with("Expected value but found T_ARR_END at character 4"));
    assert!(err("{1:2}").ends_with("Expected object key string but found T_NUMBER at character 2"));
    assert!(
        err("[1 2]").ends_with("Expected comma or array end but found T_NUMBER at character 4")
    );
    assert!(
        err("\"abc").ends_with("Expected value but found unexpected end of string at character 5")
    );
    assert!(
        err("\"\\x\"").ends_with("Expected value but found invalid escape code at character 2")
    );
    assert!(err("\"\\ud800\"").ends_with("invalid unicode escape code at character 2"));
    assert!(err("[1] x").ends_with("Expected the end but found invalid token at character 5"));
    assert!(err("a\u{0}").ends_with("JSON parser does not support UTF-16 or UTF-32"));
    let deep = "[".repeat(1001);
    assert!(err(&deep).ends_with("Found too many nested data structures (1001) at character 1001"));
}

/// A table shared down every branch encodes to 2^depth copies: the output cap (the Lua
/// heap's limit in a real state) ends it early instead of after gigabytes.
#[test]
fn output_is_capped() {
    let lua = lua();
    lua.set_named_registry_value(clib::OUTPUT_CAP, 1usize << 20)
        .unwrap();
    let code = "local a = {1} for i = 1, 40 do a = {a, a} end return cjson.encode(a)";
    let err = lua.load(code).eval::<mlua::LuaString>().unwrap_err();
    assert!(err.to_string().contains("not enough memory"), "{err}");
}

#[test]
fn config_functions() {
    let lua = lua();
    assert_eq!(
        eval(&lua, "return tostring(cjson.encode_max_depth())"),
        "1000"
    );
    assert_eq!(
        eval(
            &lua,
            "return tostring(cjson.encode_invalid_numbers('null'))"
        ),
        "null"
    );
    assert_eq!(eval(&lua, "return cjson.encode({1/0})"), "[null]");
    assert_eq!(
        eval(&lua, "return tostring(cjson.encode_invalid_numbers(true))"),
        "true"
    );
    assert_eq!(eval(&lua, "return cjson.encode({1/0, 0/0})"), "[inf,nan]");
    assert_eq!(
        eval(
            &lua,
            "cjson.encode_number_precision(3) return cjson.encode(1/3)"
        ),
        "0.333"
    );
    assert!(
        eval(&lua, "return cjson.encode_number_precision(15)").ends_with(
            "bad argument #1 to 'encode_number_precision' (expected integer between 1 and 14)"
        )
    );
    assert!(
        eval(&lua, "return cjson.encode_keep_buffer('x')")
            .ends_with("bad argument #1 to 'encode_keep_buffer' (invalid option 'x')")
    );
    assert!(
        eval(&lua, "return cjson.encode_max_depth(1, 2)")
            .ends_with("bad argument #2 to 'encode_max_depth' (found too many arguments)")
    );
    assert_eq!(
        eval(&lua, "return cjson.new().encode(1/3)"),
        "0.33333333333333"
    );
}
