//! Differential tests: the same command sequences go to a real `redis-server` (the reference)
//! and to a recached engine, and the replies must be byte-identical.
//!
//! - Cases live in `tests/diff/*.txt`; the format is documented in `tests/diff/README.md`.
//!   Each file starts on fresh connections with a flushed keyspace.
//! - Both servers start on free ports; redis-server runs with `--databases 16` (recached's default) so SELECT behaves
//!   like recached's single keyspace.
//! - A run collects every mismatch (file:line, command, both replies escaped) and fails at the
//!   end with the whole list, so one run shows everything.
//! - Replies that cannot be identical (CLIENT ID, TIME, INFO, HELLO's id…) are checked by
//!   shape in `tests/tests/shapes.rs`, against both servers (which validates the checks too).
//!
//! Environment:
//! - `DIFF_AGAINST_REDIS=1`: compare redis-server with a second redis-server instead of the
//!   engine (validates that the case files are deterministic).
//! - `DIFF_FILE=substr`: run only case files whose name contains `substr`.
//! - `DIFF_REPORT=path`: also write the mismatches as Markdown, grouped by command.
//! - `DIFF_DUMP=path`: write every case with redis-server's reply (escaped), to read what a
//!   case expects.
//! - `RECACHED_BIN`: the engine binary (see `common::recached_bin`).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a `!raw` case waits for more bytes before deciding the server is done.
const RAW_QUIET: Duration = Duration::from_millis(250);
/// Upper bound on reading the reply of one `!raw` case.
const RAW_MAX: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// Case file syntax
// ---------------------------------------------------------------------------------------------

/// Decodes one escape sequence starting after a backslash; returns (byte, chars consumed).
fn unescape_one(rest: &[u8]) -> Result<(u8, usize), String> {
    match rest.first() {
        Some(b'r') => Ok((b'\r', 1)),
        Some(b'n') => Ok((b'\n', 1)),
        Some(b't') => Ok((b'\t', 1)),
        Some(b'0') => Ok((0, 1)),
        Some(b'x') => {
            let hex = rest.get(1..3).ok_or("truncated \\x escape")?;
            let s = std::str::from_utf8(hex).map_err(|_| "bad \\x escape")?;
            let v = u8::from_str_radix(s, 16).map_err(|_| format!("bad \\x escape {s:?}"))?;
            Ok((v, 3))
        }
        Some(&c) => Ok((c, 1)), // \\ \" \' \<space> and anything else: the byte itself
        None => Err("trailing backslash".into()),
    }
}

/// Splits a command line like redis-cli does: on spaces; `"…"` with `\r \n \t \xHH \" \\`
/// escapes; `'…'` literal (only `\'` escaped). Unquoted text is taken as is.
fn split_args(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let b = line.as_bytes();
    let mut args = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut arg = Vec::new();
        while i < b.len() && !b[i].is_ascii_whitespace() {
            match b[i] {
                b'"' => {
                    i += 1;
                    loop {
                        match b.get(i) {
                            None => return Err("unbalanced double quote".into()),
                            Some(b'"') => {
                                i += 1;
                                break;
                            }
                            Some(b'\\') => {
                                let (v, n) = unescape_one(&b[i + 1..])?;
                                arg.push(v);
                                i += 1 + n;
                            }
                            Some(&c) => {
                                arg.push(c);
                                i += 1;
                            }
                        }
                    }
                }
                b'\'' => {
                    i += 1;
                    loop {
                        match b.get(i) {
                            None => return Err("unbalanced single quote".into()),
                            Some(b'\'') => {
                                i += 1;
                                break;
                            }
                            Some(b'\\') if b.get(i + 1) == Some(&b'\'') => {
                                arg.push(b'\'');
                                i += 2;
                            }
                            Some(&c) => {
                                arg.push(c);
                                i += 1;
                            }
                        }
                    }
                }
                c => {
                    arg.push(c);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
    Ok(args)
}

/// Decodes the payload of a `!raw` line: every byte as written, with `\r \n \t \xHH \\`.
fn unescape_raw(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let (v, n) = unescape_one(&b[i + 1..])?;
            out.push(v);
            i += 1 + n;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// One step of a case file.
#[derive(Debug)]
enum Step {
    /// A command; `sorted` sorts the elements of its array reply (or the array inside a SCAN
    /// reply) before comparing.
    Cmd {
        args: Vec<Vec<u8>>,
        sorted: bool,
    },
    /// Bytes sent as is on a fresh connection; all bytes received until close or quiet compare.
    Raw(Vec<u8>),
    Resp3,
    Resp2,
    Reset,
    Sleep(u64),
}

#[derive(Debug)]
struct Line {
    file: String,
    no: usize,
    text: String,
    step: Step,
}

fn parse_case_file(path: &Path) -> Vec<Line> {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {file}: {e}"));
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let bad = |e: String| -> ! { panic!("{file}:{no}: {e}: {t}") };
        let (word, rest) = t.split_once(' ').unwrap_or((t, ""));
        let step = match word {
            "!raw" => Step::Raw(unescape_raw(rest).unwrap_or_else(|e| bad(e))),
            "!resp3" => Step::Resp3,
            "!resp2" => Step::Resp2,
            "!reset" => Step::Reset,
            "!sleep" => Step::Sleep(rest.trim().parse().unwrap_or_else(|_| bad("bad ms".into()))),
            "!sorted" => Step::Cmd {
                args: split_args(rest).unwrap_or_else(|e| bad(e)),
                sorted: true,
            },
            w if w.starts_with('!') => bad(format!("unknown directive {w}")),
            _ => Step::Cmd {
                args: split_args(t).unwrap_or_else(|e| bad(e)),
                sorted: false,
            },
        };
        if matches!(&step, Step::Cmd { args, .. } if args.is_empty()) {
            bad("empty command".into());
        }
        lines.push(Line {
            file: file.clone(),
            no,
            text: t.to_string(),
            step,
        });
    }
    lines
}

/// Sorts the elements of an array/set reply, or of the array inside a 2-element SCAN reply
/// (`*2 cursor *N …`). Other replies are returned unchanged.
fn sort_reply(frame: &[u8]) -> Vec<u8> {
    fn elements(frame: &[u8]) -> Option<(Vec<u8>, Vec<&[u8]>)> {
        if !matches!(frame.first(), Some(b'*' | b'~')) {
            return None;
        }
        let eol = frame.windows(2).position(|w| w == b"\r\n")?;
        let n: i64 = std::str::from_utf8(&frame[1..eol]).ok()?.parse().ok()?;
        let head = frame[..eol + 2].to_vec();
        let mut pos = eol + 2;
        let mut out = Vec::new();
        for _ in 0..n.max(0) {
            let len = frame_len(&frame[pos..]).ok()??;
            out.push(&frame[pos..pos + len]);
            pos += len;
        }
        Some((head, out))
    }
    let Some((head, elems)) = elements(frame) else {
        return frame.to_vec();
    };
    let is_scan = elems.len() == 2
        && elems[0].starts_with(b"$")
        && matches!(elems[1].first(), Some(b'*' | b'~'));
    if is_scan {
        let mut out = head;
        out.extend_from_slice(elems[0]);
        out.extend_from_slice(&sort_reply(elems[1]));
        return out;
    }
    let mut elems = elems;
    elems.sort();
    let mut out = head;
    for e in elems {
        out.extend_from_slice(e);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The two servers
// ---------------------------------------------------------------------------------------------

/// Restarts of a crashed server before the harness stops talking to it.
const MAX_RESTARTS: usize = 5;

/// One server under comparison with its current connection. A server that dies is restarted
/// (its keyspace is then lost, and the death is reported as a mismatch), at most
/// [`MAX_RESTARTS`] times; after that every step fails fast for that side.
struct Side {
    name: &'static str,
    port: u16,
    proc: Proc,
    conn: Option<Resp>,
    is_engine: bool,
    restarts: usize,
    gave_up: bool,
}

impl Side {
    fn start(name: &'static str, engine: bool) -> Side {
        let port = free_port();
        let proc = if engine {
            spawn_engine(port)
        } else {
            spawn_redis(port)
        };
        let mut side = Side {
            name,
            port,
            proc,
            conn: None,
            is_engine: engine,
            restarts: 0,
            gave_up: false,
        };
        if let Err(e) = side.proc.try_wait_port(port, START_TIMEOUT) {
            eprintln!("{e}");
            side.proc.kill(); // ensure_running sees it as dead and restarts it
        }
        side
    }

    /// Restarts the process if it died; returns what happened, for the mismatch list.
    fn ensure_running(&mut self) -> Option<String> {
        if self.gave_up || self.proc.is_running() {
            return None;
        }
        let log = self.proc.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n    ");
        let restarts = self.restarts + 1;
        if restarts > MAX_RESTARTS {
            self.gave_up = true;
            self.conn = None;
            return Some(format!(
                "{} died {MAX_RESTARTS} times; no more steps are sent to it",
                self.name
            ));
        }
        *self = Side::start(self.name, self.is_engine);
        self.restarts = restarts;
        Some(format!(
            "{} died and was restarted (keyspace lost); log tail:\n    {tail}",
            self.name
        ))
    }

    /// A fresh connection (optionally switched to RESP3).
    fn reconnect(&mut self, resp3: bool) -> Result<(), String> {
        self.conn = None;
        if self.gave_up {
            return Err("server gave up".into());
        }
        let mut c = Resp::try_connect(self.port)?;
        if resp3 {
            c.send_raw(&Resp::encode(&[b"HELLO", b"3"]));
            c.try_read_frame()?;
        }
        self.conn = Some(c);
        Ok(())
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Result<Vec<u8>, String> {
        let c = self.conn.as_mut().ok_or("not connected")?;
        use std::io::Write;
        c.stream
            .write_all(&Resp::encode(args))
            .map_err(|e| format!("write: {e}"))?;
        c.try_read_frame()
    }
}

struct Mismatch {
    /// Upper-cased command name (or the directive), for grouping in the report.
    command: String,
    /// `file:line: case` and both replies.
    text: String,
}

/// Longest escaped reply shown in full; longer ones are cut around the first difference.
const SHOW_MAX: usize = 600;

/// Escapes both replies; long ones are shown as a window around the first differing byte.
fn show_pair(a: &[u8], b: &[u8]) -> (String, String) {
    if a.len() <= SHOW_MAX && b.len() <= SHOW_MAX {
        return (escape(a), escape(b));
    }
    let first = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let from = first.saturating_sub(120);
    let cut = |r: &[u8]| {
        let to = (first + 240).min(r.len());
        format!(
            "[{} bytes; from byte {from}, first difference at {first}] …{}…",
            r.len(),
            escape(&r[from.min(r.len())..to])
        )
    };
    (cut(a), cut(b))
}

/// Runs one case file against both sides, appending mismatches.
fn run_file(
    lines: &[Line],
    a: &mut Side,
    b: &mut Side,
    out: &mut Vec<Mismatch>,
    dump: &mut Option<String>,
) {
    let mut resp3 = false;
    for s in [&mut *a, &mut *b] {
        let _ = s.ensure_running();
        let r = s.reconnect(false).and_then(|_| s.cmd(&[b"FLUSHALL"]));
        if !matches!(&r, Ok(f) if f == b"+OK\r\n") {
            let file = lines.first().map(|l| l.file.as_str()).unwrap_or("?");
            out.push(Mismatch {
                command: "FLUSHALL".into(),
                text: format!(
                    "{file}: FLUSHALL at the start of the file failed on {}: {r:?}",
                    s.name
                ),
            });
            let _ = s.reconnect(false);
        }
    }
    for line in lines {
        let mut push = |text: String| {
            let command = match &line.step {
                Step::Cmd { args, .. } => group_name(&args[0]),
                Step::Raw(_) => "!raw".to_string(),
                _ => line.text.clone(),
            };
            out.push(Mismatch {
                command,
                text: format!("{}:{}: {}\n{text}", line.file, line.no, line.text),
            })
        };
        match &line.step {
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Step::Reset | Step::Resp2 | Step::Resp3 => {
                let args: &[&[u8]] = match line.step {
                    Step::Reset => &[b"FLUSHALL"],
                    Step::Resp2 => &[b"HELLO", b"2"],
                    _ => &[b"HELLO", b"3"],
                };
                match line.step {
                    Step::Resp2 => resp3 = false,
                    Step::Resp3 => resp3 = true,
                    _ => {}
                }
                for s in [&mut *a, &mut *b] {
                    if let Err(e) = s.cmd(args) {
                        push(format!("  {}: {e}", s.name));
                        let _ = s.ensure_running();
                        let _ = s.reconnect(resp3);
                    }
                }
            }
            Step::Cmd { args, sorted } => {
                let argv: Vec<&[u8]> = args.iter().map(|x| x.as_slice()).collect();
                let mut replies = Vec::new();
                for s in [&mut *a, &mut *b] {
                    let r = s.cmd(&argv);
                    if r.is_err() {
                        // Resynchronise: the connection may hold a late reply or be closed.
                        if let Some(m) = s.ensure_running() {
                            push(m);
                        }
                        let _ = s.reconnect(resp3);
                    }
                    replies.push(r.map(|f| if *sorted { sort_reply(&f) } else { f }));
                }
                let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                if name == "RESET" {
                    resp3 = false;
                } else if name == "HELLO" && args.len() > 1 {
                    match &args[1][..] {
                        b"3" => resp3 = true,
                        b"2" => resp3 = false,
                        _ => {}
                    }
                }
                if let (Some(d), Ok(r)) = (dump.as_mut(), &replies[0]) {
                    d.push_str(&format!(
                        "{}:{}: {}\n  {}\n",
                        line.file,
                        line.no,
                        line.text,
                        escape(r)
                    ));
                }
                if replies[0] != replies[1] {
                    let (ra, rb) = match (&replies[0], &replies[1]) {
                        (Ok(x), Ok(y)) => show_pair(x, y),
                        (x, y) => {
                            let one = |r: &Result<Vec<u8>, String>| match r {
                                Ok(f) => show_pair(f, b"").0,
                                Err(e) => format!("<{e}>"),
                            };
                            (one(x), one(y))
                        }
                    };
                    push(format!("  {:<6} {ra}\n  {:<6} {rb}", a.name, b.name));
                }
            }
            Step::Raw(bytes) => {
                let mut conns = Vec::new();
                for s in [&mut *a, &mut *b] {
                    let c = if s.gave_up {
                        Err("server gave up".to_string())
                    } else {
                        Resp::try_connect(s.port)
                    };
                    conns.push(c.map(|mut c| {
                        // A server closing early makes this write fail: the read shows it.
                        let _ = std::io::Write::write_all(&mut c.stream, bytes);
                        c
                    }));
                }
                // Both servers are read at the same time: each read ends with a quiet period.
                let got: Vec<(Vec<u8>, bool)> = std::thread::scope(|sc| {
                    let hs: Vec<_> = conns
                        .iter_mut()
                        .map(|c| {
                            sc.spawn(move || match c {
                                Ok(c) => c.read_until_close(RAW_QUIET, RAW_MAX),
                                Err(e) => (format!("<{e}>").into_bytes(), true),
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().expect("raw reader"))
                        .collect()
                });
                if let Some(d) = dump.as_mut() {
                    let closed = if got[0].1 { "<closed>" } else { "<open>" };
                    d.push_str(&format!(
                        "{}:{}: {}\n  {} {closed}\n",
                        line.file,
                        line.no,
                        line.text,
                        escape(&got[0].0)
                    ));
                }
                if got[0] != got[1] {
                    let (ra, rb) = show_pair(&got[0].0, &got[1].0);
                    let state = |closed: bool| if closed { "<closed>" } else { "<open>" };
                    push(format!(
                        "  {:<6} {ra} {}\n  {:<6} {rb} {}",
                        a.name,
                        state(got[0].1),
                        b.name,
                        state(got[1].1)
                    ));
                }
                for s in [&mut *a, &mut *b] {
                    if let Some(m) = s.ensure_running() {
                        push(m);
                        let _ = s.reconnect(resp3);
                    }
                }
            }
        }
    }
}

/// Commands of the engine's list (issue 2); other names are grouped as unknown commands.
const KNOWN: &[&str] = &[
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "PSETEX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "MGET",
    "MSET",
    "MSETNX",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "INCRBYFLOAT",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SETRANGE",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TOUCH",
    "TYPE",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "PERSIST",
    "RENAME",
    "RENAMENX",
    "KEYS",
    "SCAN",
    "RANDOMKEY",
    "DBSIZE",
    "FLUSHDB",
    "FLUSHALL",
    "SELECT",
    "PING",
    "ECHO",
    "QUIT",
    "RESET",
    "TIME",
    "INFO",
    "COMMAND",
    "CONFIG",
    "CLIENT",
    "HELLO",
];

/// The report group of a command line: its name if known, else "(unknown command)".
fn group_name(name: &[u8]) -> String {
    let up = String::from_utf8_lossy(name).to_ascii_uppercase();
    if KNOWN.contains(&up.as_str()) {
        up
    } else {
        "(unknown command)".into()
    }
}

fn case_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("diff");
    let filter = std::env::var("DIFF_FILE").unwrap_or_default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(&filter))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no case files in {}", dir.display());
    files
}

fn against_redis() -> bool {
    std::env::var("DIFF_AGAINST_REDIS").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn write_report(path: &str, mismatches: &[Mismatch], total: usize, b_name: &str) {
    let mut by_cmd: BTreeMap<&str, Vec<&Mismatch>> = BTreeMap::new();
    for m in mismatches {
        by_cmd.entry(&m.command).or_default().push(m);
    }
    let mut s = format!(
        "# Differential test report\n\nredis-server 7 vs {b_name}: {} mismatches in {total} \
         steps. Generated by `DIFF_REPORT={path} cargo test -p it --test differential`.\n\
         Each entry: `file:line: case`, then the reply of redis, then ours (escaped).\n\n",
        mismatches.len()
    );
    if mismatches.is_empty() {
        s.push_str("All cases match.\n");
        std::fs::write(path, s).unwrap_or_else(|e| panic!("write {path}: {e}"));
        return;
    }
    s.push_str("| command | mismatches |\n|---|---|\n");
    for (cmd, ms) in &by_cmd {
        s.push_str(&format!("| {cmd} | {} |\n", ms.len()));
    }
    for (cmd, ms) in &by_cmd {
        s.push_str(&format!("\n## {cmd} ({})\n\n```\n", ms.len()));
        for m in ms {
            s.push_str(&m.text);
            s.push('\n');
        }
        s.push_str("```\n");
    }
    std::fs::write(path, s).unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// The differential run over every case file.
#[test]
fn differential_cases() {
    let files = case_files();
    let parsed: Vec<Vec<Line>> = files.iter().map(|f| parse_case_file(f)).collect();
    let mut a = Side::start("redis", false);
    let (mut b, b_name) = if against_redis() {
        (Side::start("redis2", false), "redis-server")
    } else {
        (Side::start("ours", true), "recached")
    };
    let mut mismatches = Vec::new();
    let total: usize = parsed.iter().map(|l| l.len()).sum();
    let dump_path = std::env::var("DIFF_DUMP").ok();
    let mut dump = dump_path.as_ref().map(|_| String::new());
    for lines in &parsed {
        run_file(lines, &mut a, &mut b, &mut mismatches, &mut dump);
    }
    if let (Some(p), Some(d)) = (&dump_path, &dump) {
        std::fs::write(p, d).unwrap_or_else(|e| panic!("write {p}: {e}"));
    }
    if let Ok(path) = std::env::var("DIFF_REPORT") {
        write_report(&path, &mismatches, total, b_name);
    }
    if !mismatches.is_empty() {
        let list: Vec<&str> = mismatches.iter().map(|m| m.text.as_str()).collect();
        panic!(
            "{} of {total} differential steps differ (redis vs {b_name}):\n\n{}\n",
            mismatches.len(),
            list.join("\n\n")
        );
    }
    eprintln!("{total} differential steps in {} files match", files.len());
}

// ---------------------------------------------------------------------------------------------
// Harness self-tests (no servers)
// ---------------------------------------------------------------------------------------------

#[test]
fn harness_split_args() {
    let v = split_args(r#"SET "a b" 'c d' "\x00\r\n" x"y"z "" "\"""#).unwrap();
    let want: Vec<&[u8]> = vec![b"SET", b"a b", b"c d", b"\0\r\n", b"xyz", b"", b"\""];
    assert_eq!(v, want);
    assert!(split_args(r#"GET "abc"#).is_err());
    assert_eq!(
        unescape_raw(r"*1\r\n$4\r\nPING\r\n").unwrap(),
        b"*1\r\n$4\r\nPING\r\n"
    );
}

#[test]
fn harness_sort_reply() {
    assert_eq!(
        sort_reply(b"*3\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nb\r\n"),
        b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(
        sort_reply(b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\ny\r\n$1\r\nx\r\n"),
        b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
    );
    assert_eq!(sort_reply(b"$1\r\nz\r\n"), b"$1\r\nz\r\n");
    assert_eq!(frame_len(b"%1\r\n+a\r\n:1\r\n"), Ok(Some(12)));
    assert_eq!(frame_len(b"*-1\r\n"), Ok(Some(5)));
    assert_eq!(frame_len(b"$3\r\nab"), Ok(None));
}

// ---------------------------------------------------------------------------------------------
// Generated streams: pipelines, requests split across reads, big values, size limits
// ---------------------------------------------------------------------------------------------

/// Sends `chunks` on a fresh connection (pausing `pause` between chunks) while reading
/// concurrently; returns everything received until the server closed, or was quiet for
/// 500 ms after the last chunk was written (at most 60 s), and whether it closed.
fn exchange(port: u16, chunks: &[Vec<u8>], pause: Duration) -> (Vec<u8>, bool) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let c = Resp::connect(port);
    let mut w = c.stream.try_clone().expect("clone stream");
    let mut r = c.stream;
    r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for ch in chunks {
                if w.write_all(ch).is_err() {
                    break; // the server closed: the reader reports it
                }
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut out = Vec::new();
        let mut last = Instant::now();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, true),
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    last = Instant::now();
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, true),
                Err(_) => {}
            }
            let idle = last.elapsed() > Duration::from_millis(500);
            if (done.load(Ordering::SeqCst) && idle) || Instant::now() > deadline {
                // Unblock a writer stuck on a full socket (it stops at the first error).
                let _ = r.shutdown(std::net::Shutdown::Both);
                return (out, false);
            }
        }
    })
}

fn mb(args: &[&[u8]]) -> Vec<u8> {
    Resp::encode(args)
}

/// Splits `bytes` into chunks of 1..=7 bytes (a fixed pattern), so that requests arrive cut at
/// every kind of offset.
fn split_small(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut n = 1;
    while i < bytes.len() {
        let end = (i + n).min(bytes.len());
        out.push(bytes[i..end].to_vec());
        i = end;
        n = n % 7 + 1;
    }
    out
}

/// Streams that are awkward to write as case lines; each runs on both servers and the whole
/// byte streams must be identical.
fn generated_streams() -> Vec<(String, Vec<Vec<u8>>, Duration)> {
    let mut cases: Vec<(String, Vec<Vec<u8>>, Duration)> = Vec::new();

    // A mixed stream (multibulk, inline, errors, options) cut into 1..7-byte pieces.
    let mut mixed = Vec::new();
    mixed.extend(mb(&[b"FLUSHALL"]));
    mixed.extend(mb(&[b"SET", b"k", b"v", b"EX", b"100"]));
    mixed.extend(b"GET k\r\n");
    mixed.extend(mb(&[b"INCR", b"k"]));
    mixed.extend(mb(&[b"MSET", b"a", b"1", b"b", b"\x00\r\n\xff"]));
    mixed.extend(b"MGET a b c\n");
    mixed.extend(mb(&[b"INCRBYFLOAT", b"f", b"1.5"]));
    mixed.extend(mb(&[b"NOSUCH", b"x"]));
    mixed.extend(b"ECHO \"q\\x41\"\r\n");
    mixed.extend(mb(&[b"GETRANGE", b"b", b"0", b"-1"]));
    mixed.extend(mb(&[b"DEL", b"a", b"b", b"k", b"f"]));
    mixed.extend(mb(&[b"PING"]));
    cases.push((
        "mixed stream, whole".into(),
        vec![mixed.clone()],
        Duration::ZERO,
    ));
    cases.push((
        "mixed stream, 1..7-byte pieces".into(),
        split_small(&mixed),
        Duration::from_millis(1),
    ));
    // The same cut before a protocol error: replies up to the error, then close.
    let mut bad = mixed.clone();
    bad.extend(b"*2\r\n$3\r\nGET\r\n$x\r\n");
    cases.push((
        "pieces then a protocol error".into(),
        split_small(&bad),
        Duration::from_millis(1),
    ));

    // A pipeline of 10000 commands in one write.
    let mut pipe = mb(&[b"DEL", b"counter"]);
    for i in 0..10_000 {
        if i % 10 == 9 {
            pipe.extend(mb(&[b"GET", b"counter"]));
        } else {
            pipe.extend(mb(&[b"INCR", b"counter"]));
        }
    }
    cases.push(("pipeline of 10000".into(), vec![pipe], Duration::ZERO));

    // Many inline commands in one write.
    let inline: Vec<u8> = (0..2000)
        .flat_map(|i| format!("SET i{} {}\r\nGET i{}\r\n", i % 50, i, i % 50).into_bytes())
        .collect();
    cases.push(("2000 inline pairs".into(), vec![inline], Duration::ZERO));

    // Big values: 1 MB and 8 MB of binary data; APPEND, STRLEN, GETRANGE on them.
    let big1: Vec<u8> = (0..1_048_576u32).map(|i| (i * 31 % 251) as u8).collect();
    let big8: Vec<u8> = (0..8 * 1_048_576u32).map(|i| (i % 253) as u8).collect();
    let mut s = mb(&[b"SET", b"big", &big1]);
    s.extend(mb(&[b"GET", b"big"]));
    s.extend(mb(&[b"APPEND", b"big", &big8]));
    s.extend(mb(&[b"STRLEN", b"big"]));
    s.extend(mb(&[b"GETRANGE", b"big", b"1048570", b"1048600"]));
    s.extend(mb(&[b"GETRANGE", b"big", b"-10", b"-1"]));
    s.extend(mb(&[b"SETRANGE", b"big", b"9437180", b"tail"]));
    s.extend(mb(&[b"GET", b"big"]));
    s.extend(mb(&[b"ECHO", &big1]));
    s.extend(mb(&[b"DEL", b"big"]));
    cases.push(("big values".into(), vec![s.clone()], Duration::ZERO));
    cases.push((
        "big values, 64 KB pieces".into(),
        s.chunks(65_536).map(|c| c.to_vec()).collect(),
        Duration::ZERO,
    ));

    // MSET / MGET / DEL with 5000 keys.
    let keys: Vec<Vec<u8>> = (0..5000).map(|i| format!("mk:{i}").into_bytes()).collect();
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for k in &keys {
        mset.push(k);
        mset.push(k);
    }
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(|k| k.as_slice()));
    mget.push(b"missing");
    let mut del: Vec<&[u8]> = vec![b"DEL"];
    del.extend(keys.iter().map(|k| k.as_slice()));
    let mut s = mb(&mset);
    s.extend(mb(&mget));
    s.extend(mb(&[b"DBSIZE"]));
    s.extend(mb(&del));
    s.extend(mb(&[b"DBSIZE"]));
    cases.push(("5000-key MSET/MGET/DEL".into(), vec![s], Duration::ZERO));

    // Long unknown command names and arguments: the error text truncates them.
    let long = vec![b'x'; 1000];
    let mid = vec![b'y'; 200];
    let mut s = mb(&[&long, &mid, &mid, b"z"]);
    s.extend(mb(&[b"NOPE", b"a", &mid, b"b"]));
    let many: Vec<Vec<u8>> = (0..40).map(|i| format!("arg{i}").into_bytes()).collect();
    let mut m: Vec<&[u8]> = vec![b"NOPE"];
    m.extend(many.iter().map(|x| x.as_slice()));
    s.extend(mb(&m));
    s.extend(mb(&[b"GET", &long, b"extra"]));
    cases.push(("long unknown commands".into(), vec![s], Duration::ZERO));

    // Size limits of the request parser (redis networking.c: PROTO_INLINE_MAX_SIZE = 64 KB).
    let mut s = b"ECHO ".to_vec();
    s.extend(vec![b'a'; 70_000]);
    cases.push(("inline request over 64 KB".into(), vec![s], Duration::ZERO));
    let mut s = b"ECHO ".to_vec();
    s.extend(vec![b'a'; 60_000]);
    s.extend(b"\r\n");
    cases.push(("inline request under 64 KB".into(), vec![s], Duration::ZERO));
    let mut s = b"*".to_vec();
    s.extend(vec![b'1'; 70_000]);
    cases.push((
        "multibulk count line over 64 KB".into(),
        vec![s],
        Duration::ZERO,
    ));
    let mut s = b"*1\r\n$".to_vec();
    s.extend(vec![b'1'; 70_000]);
    cases.push((
        "bulk length line over 64 KB".into(),
        vec![s],
        Duration::ZERO,
    ));
    cases
}

/// Generated streams give byte-identical output on redis-server and the engine.
#[test]
fn differential_streams() {
    let (a_port, b_port) = (free_port(), free_port());
    let _a = start_redis(a_port);
    let (_b, b_name) = if against_redis() {
        (start_redis(b_port), "redis-server")
    } else {
        (start_engine(b_port), "recached")
    };
    let mut failed = Vec::new();
    for (name, chunks, pause) in generated_streams() {
        let (ra, rb) = std::thread::scope(|sc| {
            let ha = sc.spawn(|| exchange(a_port, &chunks, pause));
            let hb = sc.spawn(|| exchange(b_port, &chunks, pause));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let head = escape(&ra.0[..ra.0.len().min(80)]);
        eprintln!("{name}: {} bytes, closed={}: {head}", ra.0.len(), ra.1);
        if ra != rb {
            let (x, y) = show_pair(&ra.0, &rb.0);
            failed.push(format!(
                "{name}:\n  redis  {x} closed={}\n  {b_name:<6} {y} closed={}",
                ra.1, rb.1
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} generated streams differ (redis vs {b_name}):\n{}",
        failed.len(),
        failed.join("\n")
    );
}
