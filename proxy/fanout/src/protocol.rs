//! The browser wire protocol: JSON text frames over the WebSocket at `/ws` (the full reference
//! with examples is docs/browser-protocol.md). Pure: messages in, strings out.
//!
//! # Values
//!
//! Keys, prefixes and arguments are byte strings. On the wire each is a JSON string when it is
//! valid UTF-8, else an object `{"b64": "<standard base64>"}` (RFC 4648 §4, padded).
//!
//! # Browser → fan-out
//!
//! | `type` | fields | reply |
//! |---|---|---|
//! | `subscribe` | `prefixes` (array, ≤ [`MAX_PREFIXES`], each ≤ [`MAX_PREFIX_LEN`] bytes), `token` (string, optional), `db` (integer 0 ≤ db ≤ [`MAX_DB`], optional, default 0: the engine database to follow), `resume` (optional array of `{instance, run, seq}`) | `subscribed`, then per instance a snapshot or a resume |
//! | `ping` | — | `pong` |
//!
//! Anything else — not JSON, not an object, an unknown `type`, a second `subscribe`, a
//! binary frame — gets `{"type":"error","code":…,"message":…}`; a frame over the size limit,
//! invalid UTF-8 or a bad token closes the connection.
//!
//! # Fan-out → browser
//!
//! `hello`, `subscribed`, `must-refetch`, `snapshot`, `entry`, `snapshot-end`, `up-to-date`,
//! `keychange`, `flush`, `heartbeat`, `pong`, `error` — built by the functions below.
//!
//! # Prefixes
//!
//! A prefix selects every key that starts with it (bytes, case-sensitive); `""` selects all.
//! One trailing `*` is dropped (`"user:*"` = `"user:"`, `"*"` = `""`): prefixes are not globs.
//! What a browser receives is the intersection of what it asked for and what its token allows
//! ([`intersect`]), so asking for `""` or `"*"` with a `public:` token yields `public:`.

use serde_json::Value;

/// Most prefixes in one `subscribe`.
pub const MAX_PREFIXES: usize = 64;
/// Longest prefix, bytes.
pub const MAX_PREFIX_LEN: usize = 1024;
/// Most `resume` positions in one `subscribe`.
const MAX_RESUME: usize = 1024;
/// Largest database index a `subscribe` may name (Redis's own bound, `INT_MAX`); an index
/// the engines do not have is refused by them (`snapshot-failed`).
pub const MAX_DB: u64 = i32::MAX as u64;

/// A message from a browser.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientMsg {
    Subscribe {
        prefixes: Vec<Vec<u8>>,
        token: Option<String>,
        /// The engine database to follow (default 0).
        db: usize,
        resume: Vec<Resume>,
    },
    Ping,
}

/// Where a reconnecting browser's copy of one instance stands: it has applied every effect of
/// run `run` up to and including `seq` that matched its prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub instance: usize,
    pub run: String,
    pub seq: u64,
}

/// Why a browser message was refused: `code` is a stable identifier, `message` prose.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtoError {
    pub code: &'static str,
    pub message: String,
}

fn err(code: &'static str, message: impl Into<String>) -> ProtoError {
    ProtoError {
        code,
        message: message.into(),
    }
}

/// Parses one text frame from a browser.
pub fn parse_client(text: &str) -> Result<ClientMsg, ProtoError> {
    let v: Value = serde_json::from_str(text).map_err(|e| err("bad-json", e.to_string()))?;
    let Value::Object(obj) = v else {
        return Err(err("bad-message", "a message is a JSON object"));
    };
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "ping" => Ok(ClientMsg::Ping),
        "subscribe" => {
            let prefixes = match obj.get("prefixes") {
                Some(Value::Array(items)) => {
                    if items.len() > MAX_PREFIXES {
                        return Err(err(
                            "bad-message",
                            format!("at most {MAX_PREFIXES} prefixes"),
                        ));
                    }
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        let p = decode_bytes(item)
                            .ok_or_else(|| err("bad-message", "a prefix is a string"))?;
                        if p.len() > MAX_PREFIX_LEN {
                            return Err(err(
                                "bad-message",
                                format!("a prefix is at most {MAX_PREFIX_LEN} bytes"),
                            ));
                        }
                        out.push(p);
                    }
                    out
                }
                None => vec![Vec::new()],
                Some(_) => return Err(err("bad-message", "prefixes is an array of strings")),
            };
            let token = match obj.get("token") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(err("bad-message", "token is a string")),
            };
            let db = match obj.get("db") {
                None | Some(Value::Null) => 0,
                Some(v) => match v.as_u64().filter(|&n| n <= MAX_DB) {
                    Some(n) => n as usize,
                    None => {
                        return Err(err(
                            "bad-message",
                            format!("db is an integer from 0 to {MAX_DB}"),
                        ));
                    }
                },
            };
            let resume = match obj.get("resume") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) if items.len() <= MAX_RESUME => items
                    .iter()
                    .map(parse_resume)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        err(
                            "bad-message",
                            "resume is an array of {instance, run, seq} objects",
                        )
                    })?,
                Some(_) => {
                    return Err(err(
                        "bad-message",
                        "resume is an array of {instance, run, seq} objects",
                    ));
                }
            };
            Ok(ClientMsg::Subscribe {
                prefixes,
                token,
                db,
                resume,
            })
        }
        "" => Err(err(
            "bad-message",
            "a message needs a string field \"type\"",
        )),
        other => Err(err(
            "unknown-type",
            format!(
                "unknown message type '{}'",
                other.chars().take(64).collect::<String>()
            ),
        )),
    }
}

fn parse_resume(v: &Value) -> Option<Resume> {
    let o = v.as_object()?;
    Some(Resume {
        instance: usize::try_from(o.get("instance")?.as_u64()?).ok()?,
        run: o.get("run")?.as_str()?.chars().take(64).collect(),
        seq: o.get("seq")?.as_u64()?,
    })
}

/// A wire value (string or `{"b64": …}`) → bytes.
fn decode_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Object(o) => base64_decode(o.get("b64")?.as_str()?),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Prefixes

/// Drops one trailing `*`, then removes duplicates and prefixes covered by a shorter one
/// (`["a:", "a:b", ""]` → `[""]`). The result is sorted.
pub fn normalize(prefixes: &[Vec<u8>]) -> Vec<Vec<u8>> {
    minimize(
        prefixes
            .iter()
            .map(|p| p.strip_suffix(b"*").unwrap_or(p).to_vec())
            .collect(),
    )
}

/// Sorts, dedups and drops every prefix another one already covers. Unlike [`normalize`] it
/// strips nothing: it is applied to prefixes that are already normalized, where a trailing `*`
/// is a literal byte of the prefix.
fn minimize(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v.dedup();
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(v.len());
    for p in v {
        // Sorted order puts a covering prefix before everything it covers.
        if !out.iter().any(|q| p.starts_with(q)) {
            out.push(p);
        }
    }
    out
}

/// The keys both sets select: for each pair, the longer prefix when one extends the other.
pub fn intersect(requested: &[Vec<u8>], allowed: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let (requested, allowed) = (normalize(requested), normalize(allowed));
    let mut out = Vec::new();
    for r in &requested {
        for a in &allowed {
            if r.starts_with(a) {
                out.push(r.clone());
            } else if a.starts_with(r) {
                out.push(a.clone());
            }
        }
    }
    // Not `normalize`: stripping a `*` a second time would widen the result beyond what
    // `allowed` grants (a token for `a**`, i.e. keys starting with `a*`, would get `a`).
    minimize(out)
}

/// Whether `key` is selected by one of `prefixes`.
pub fn matches(prefixes: &[Vec<u8>], key: &[u8]) -> bool {
    prefixes.iter().any(|p| key.starts_with(p))
}

// ---------------------------------------------------------------------------------------
// Fan-out → browser

/// Appends `b` as a wire value (see the module doc, *Values*).
pub fn push_bytes(out: &mut String, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(s) => push_str(out, s),
        Err(_) => {
            out.push_str("{\"b64\":\"");
            base64_encode(out, b);
            out.push_str("\"}");
        }
    }
}

/// Appends `s` as a JSON string literal (RFC 8259 §7 escapes).
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let esc = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push_str(esc);
        }
        start = i + c.len_utf8();
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn push_args(out: &mut String, args: &[&[u8]]) {
    out.push('[');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_bytes(out, a);
    }
    out.push(']');
}

/// `hello`: sent once on connect.
pub fn hello(instances: usize, heartbeat_ms: u64, max_message: usize, auth: bool) -> String {
    format!(
        "{{\"type\":\"hello\",\"server\":\"recached-fanout/{}\",\"instances\":{instances},\
         \"heartbeat_ms\":{heartbeat_ms},\"max_message\":{max_message},\"auth\":{auth}}}",
        env!("CARGO_PKG_VERSION")
    )
}

/// `slots`: the fleet's slot table, `owners[slot]` = instance (`None`: no instance serves
/// it), as ranges `[first, last, instance]` in slot order; `instances` = how many instance
/// numbers exist (retired ones included: numbers are never reused for another engine).
pub fn slots(instances: usize, owners: &[Option<u16>]) -> String {
    let mut s = format!("{{\"type\":\"slots\",\"instances\":{instances},\"slots\":[");
    let mut first = true;
    let mut at = 0;
    while at < owners.len() {
        let owner = owners[at];
        let mut end = at;
        while end + 1 < owners.len() && owners[end + 1] == owner {
            end += 1;
        }
        if let Some(i) = owner {
            if !first {
                s.push(',');
            }
            first = false;
            s.push_str(&format!("[{at},{end},{i}]"));
        }
        at = end + 1;
    }
    s.push_str("]}");
    s
}

/// `subscribed`: the prefixes in effect (requested ∩ allowed) and the database followed.
pub fn subscribed(prefixes: &[Vec<u8>], db: usize) -> String {
    let mut s = String::from("{\"type\":\"subscribed\",\"prefixes\":[");
    for (i, p) in prefixes.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        push_bytes(&mut s, p);
    }
    s.push_str("],\"db\":");
    s.push_str(&db.to_string());
    s.push('}');
    s
}

/// `must-refetch`: drop every local key of `instance`; a snapshot follows.
pub fn must_refetch(instance: usize, reason: &str) -> String {
    let mut s = format!("{{\"type\":\"must-refetch\",\"instance\":{instance},\"reason\":");
    push_str(&mut s, reason);
    s.push('}');
    s
}

/// `snapshot`: the entries that follow recreate the subscribed keys of `instance` as of `seq`.
pub fn snapshot(instance: usize, run: &str, seq: u64, keys: u64) -> String {
    let mut s = format!("{{\"type\":\"snapshot\",\"instance\":{instance},\"run\":");
    push_str(&mut s, run);
    s.push_str(&format!(",\"seq\":{seq},\"keys\":{keys}}}"));
    s
}

/// `entry`: one command of a snapshot.
pub fn entry(instance: usize, args: &[&[u8]]) -> String {
    let mut s = format!("{{\"type\":\"entry\",\"instance\":{instance},\"args\":");
    push_args(&mut s, args);
    s.push('}');
    s
}

/// `snapshot-end`.
pub fn snapshot_end(instance: usize, seq: u64) -> String {
    format!("{{\"type\":\"snapshot-end\",\"instance\":{instance},\"seq\":{seq}}}")
}

/// `up-to-date`: the browser's copy of `instance` has every change up to `seq` of run `run`.
pub fn up_to_date(instance: usize, run: &str, seq: u64) -> String {
    let mut s = format!("{{\"type\":\"up-to-date\",\"instance\":{instance},\"run\":");
    push_str(&mut s, run);
    s.push_str(&format!(",\"seq\":{seq}}}"));
    s
}

/// `keychange`: effect `seq` of `instance`, to apply as is; `key` is its first key.
pub fn keychange(instance: usize, seq: u64, key: &[u8], args: &[&[u8]]) -> String {
    let mut s = format!("{{\"type\":\"keychange\",\"instance\":{instance},\"seq\":{seq},\"key\":");
    push_bytes(&mut s, key);
    s.push_str(",\"args\":");
    push_args(&mut s, args);
    s.push('}');
    s
}

/// `flush`: every key of `instance` is gone (FLUSHALL on that engine).
pub fn flush(instance: usize, seq: u64) -> String {
    format!("{{\"type\":\"flush\",\"instance\":{instance},\"seq\":{seq}}}")
}

/// `heartbeat`: per instance the position the browser has reached (`null` while it is not
/// live on that instance), so a reconnect can resume from there.
pub fn heartbeat(seqs: &[Option<u64>]) -> String {
    let mut s = String::from("{\"type\":\"heartbeat\",\"seqs\":[");
    for (i, q) in seqs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        match q {
            Some(q) => s.push_str(&q.to_string()),
            None => s.push_str("null"),
        }
    }
    s.push_str("]}");
    s
}

pub fn pong() -> String {
    "{\"type\":\"pong\"}".to_string()
}

/// `error`: the request was refused; the connection stays open unless a close follows.
pub fn error(code: &str, message: &str) -> String {
    let mut s = String::from("{\"type\":\"error\",\"code\":");
    push_str(&mut s, code);
    s.push_str(",\"message\":");
    push_str(&mut s, message);
    s.push('}');
    s
}

// ---------------------------------------------------------------------------------------
// base64 (RFC 4648 §4, with padding)

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(out: &mut String, b: &[u8]) {
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        let mut pad = 0;
        for (i, &c) in chunk.iter().enumerate() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' if i >= 2 => {
                    pad += 1;
                    0
                }
                _ => return None,
            };
            if pad > 0 && c != b'=' {
                return None;
            }
            n = (n << 6) | u32::from(v);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    /// Found by the `fanout` fuzz target: the intersection was normalized twice, so a token
    /// for the prefix `a*` (written `a**`) was widened to every key starting with `a`.
    #[test]
    fn intersect_never_widens_the_allowed_prefix() {
        let p = |s: &str| s.as_bytes().to_vec();
        let got = intersect(&[p("")], &[p("a**")]);
        assert_eq!(got, vec![p("a*")]);
        assert!(!matches(&got, b"ab"));
        assert!(matches(&got, b"a*b"));
        for requested in ["", "*", "a", "a*", "a**", "a***"] {
            for key in [&b"ab"[..], b"a", b"b"] {
                assert!(
                    !matches(&intersect(&[p(requested)], &[p("a**")]), key),
                    "{requested:?} reached {key:?}"
                );
            }
        }
    }

    use super::*;

    fn v(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn prefixes_normalize_and_intersect() {
        assert_eq!(normalize(&v(&["a:", "a:b", "b*"])), v(&["a:", "b"]));
        assert_eq!(normalize(&v(&["x", "", "y"])), v(&[""]));
        assert_eq!(normalize(&v(&["*"])), v(&[""]));
        let public = v(&["public:"]);
        assert_eq!(intersect(&v(&[""]), &public), public);
        assert_eq!(intersect(&v(&["*"]), &public), public);
        assert_eq!(intersect(&v(&["public:a"]), &public), v(&["public:a"]));
        assert!(intersect(&v(&["private:"]), &public).is_empty());
        assert!(intersect(&v(&["pub"]), &v(&["public:"])) == v(&["public:"]));
        assert!(intersect(&v(&["privat", "private:x"]), &public).is_empty());
        assert!(matches(&public, b"public:k") && !matches(&public, b"private:k"));
        assert!(!matches(&[], b"k"));
    }

    #[test]
    fn client_messages() {
        assert_eq!(parse_client(r#"{"type":"ping"}"#), Ok(ClientMsg::Ping));
        let m = parse_client(
            r#"{"type":"subscribe","prefixes":["a:",{"b64":"/w=="}],"token":"t",
                "resume":[{"instance":1,"run":"r","seq":7}]}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            ClientMsg::Subscribe {
                prefixes: vec![b"a:".to_vec(), vec![0xff]],
                token: Some("t".into()),
                db: 0,
                resume: vec![Resume {
                    instance: 1,
                    run: "r".into(),
                    seq: 7
                }],
            }
        );
        for (bad, code) in [
            ("", "bad-json"),
            ("{", "bad-json"),
            ("[1]", "bad-message"),
            ("{}", "bad-message"),
            (r#"{"type":"nope"}"#, "unknown-type"),
            (r#"{"type":"subscribe","prefixes":"a"}"#, "bad-message"),
            (r#"{"type":"subscribe","prefixes":[1]}"#, "bad-message"),
            (r#"{"type":"subscribe","token":5}"#, "bad-message"),
            (r#"{"type":"subscribe","db":-1}"#, "bad-message"),
            (r#"{"type":"subscribe","db":1.5}"#, "bad-message"),
            (r#"{"type":"subscribe","db":"1"}"#, "bad-message"),
            (r#"{"type":"subscribe","db":2147483648}"#, "bad-message"),
            (
                r#"{"type":"subscribe","resume":[{"instance":-1}]}"#,
                "bad-message",
            ),
        ] {
            assert_eq!(parse_client(bad).unwrap_err().code, code, "{bad}");
        }
        let many = format!(
            r#"{{"type":"subscribe","prefixes":[{}]}}"#,
            vec!["\"a\""; MAX_PREFIXES + 1].join(",")
        );
        assert_eq!(parse_client(&many).unwrap_err().code, "bad-message");
        let m = parse_client(r#"{"type":"subscribe","db":3}"#).unwrap();
        assert!(matches!(m, ClientMsg::Subscribe { db: 3, .. }), "{m:?}");
        let s = subscribed(&[b"a:".to_vec()], 3);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["db"], 3);
        assert_eq!(v["prefixes"][0], "a:");
    }

    #[test]
    fn outgoing_is_valid_json_with_binary() {
        let s = keychange(1, 42, b"k\"\n", &[b"SET", b"k\"\n", b"\xff\x00\x01"]);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["type"], "keychange");
        assert_eq!(v["seq"], 42);
        assert_eq!(v["key"], "k\"\n");
        assert_eq!(v["args"][2]["b64"], "/wAB");
        assert_eq!(decode_bytes(&v["args"][2]), Some(vec![0xff, 0, 1]));
        let e = error("x", "\u{1}\u{2028}");
        assert_eq!(
            serde_json::from_str::<Value>(&e).unwrap()["message"],
            "\u{1}\u{2028}"
        );
        for n in 0..10 {
            let b: Vec<u8> = (0..n).map(|i| (i * 77 + 3) as u8).collect();
            let mut s = String::new();
            base64_encode(&mut s, &b);
            assert_eq!(base64_decode(&s), Some(b));
        }
        assert_eq!(base64_decode("a==="), None);
        assert_eq!(base64_decode("ab=c"), None);
        assert_eq!(
            heartbeat(&[Some(3), None]),
            r#"{"type":"heartbeat","seqs":[3,null]}"#
        );
    }
}

/// `payload` as one unmasked, final WebSocket text frame (RFC 6455 §5.2: a server never
/// masks). Built once per effect and copied into every browser that sees it.
pub fn text_frame(payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut out = Vec::with_capacity(n + 10);
    out.push(0x81); // FIN, opcode 1 (text)
    if n < 126 {
        out.push(n as u8);
    } else if n <= u16::MAX as usize {
        out.push(126);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod frame_tests {
    use super::text_frame;

    /// RFC 6455 §5.2 length forms, checked against tungstenite's own encoder.
    #[test]
    fn text_frames_match_tungstenite() {
        for n in [0usize, 1, 125, 126, 127, 65535, 65536, 70000] {
            let payload = "k".repeat(n);
            let ours = text_frame(payload.as_bytes());
            let mut theirs = Vec::new();
            tungstenite::protocol::frame::Frame::message(
                payload.clone().into_bytes(),
                tungstenite::protocol::frame::coding::OpCode::Data(
                    tungstenite::protocol::frame::coding::Data::Text,
                ),
                true,
            )
            .format(&mut theirs)
            .unwrap();
            assert_eq!(ours, theirs, "payload of {n} bytes");
        }
    }
}
