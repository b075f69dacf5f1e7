//! Unit tests of users, rules, the check and DRYRUN, against redis 7.0's texts.

use super::rules::hex;
use super::*;
use crate::command;

#[test]
fn sha256_vectors() {
    assert_eq!(
        hex(&sha256(b"")),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Two blocks; and Redis's own hash of "pw" (ACL LIST after `>pw`).
    assert_eq!(
        hex(&sha256(
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        )),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_eq!(
        hex(&sha256(b"pw")),
        "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
    );
}

fn acl_with(rules: &[&str]) -> Acl {
    let mut acl = Acl::new();
    let r: Vec<&[u8]> = rules.iter().map(|s| s.as_bytes()).collect();
    acl.set_user(b"u", &r).unwrap();
    acl
}

fn line(acl: &Acl, name: &str) -> String {
    acl.list()
        .into_iter()
        .find(|l| l.starts_with(&format!("user {name} ")))
        .unwrap()
}

#[test]
fn descriptions_match_redis() {
    let acl = Acl::new();
    assert_eq!(acl.list(), vec!["user default on nopass ~* &* +@all"]);
    assert!(!acl.restricted());
    let acl = acl_with(&[]);
    assert_eq!(line(&acl, "u"), "user u off resetchannels -@all");
    assert!(acl.restricted());
    let acl = acl_with(&["on", ">pw", "~app:*", "+@read"]);
    assert_eq!(
        line(&acl, "u"),
        "user u on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 \
         ~app:* resetchannels -@all +@read"
    );
    let acl = acl_with(&["+@all", "-get", "+@string"]);
    assert_eq!(line(&acl, "u"), "user u off resetchannels +@all");
    let acl = acl_with(&["+config", "-config|set"]);
    assert_eq!(
        line(&acl, "u"),
        "user u off resetchannels -@all +config -config|set"
    );
    let acl = acl_with(&["+select|0"]);
    assert_eq!(line(&acl, "u"), "user u off resetchannels -@all +select|0");
    let acl = acl_with(&["&x", "resetchannels", "&y"]);
    assert_eq!(line(&acl, "u"), "user u off resetchannels &y -@all");
    let acl = acl_with(&["reset"]);
    assert_eq!(
        line(&acl, "u"),
        "user u off sanitize-payload resetchannels -@all"
    );
    let acl = acl_with(&["%R~a", "%W~b", "%RW~c", "~d", "allchannels", "+ping"]);
    assert_eq!(line(&acl, "u"), "user u off %R~a %W~b ~c ~d &* -@all +ping");
}

#[test]
fn rule_errors_match_redis() {
    let mut acl = Acl::new();
    let err = |acl: &mut Acl, r: &str| acl.set_user(b"x", &[r.as_bytes()]).unwrap_err();
    assert_eq!(
        err(&mut acl, "badrule"),
        "Error in ACL SETUSER modifier 'badrule': Syntax error"
    );
    assert!(err(&mut acl, "+nonexist").ends_with("Unknown command or category name in ACL"));
    assert!(err(&mut acl, "+@nonexist").ends_with("Unknown command or category name in ACL"));
    assert!(err(&mut acl, "+select|0|1").ends_with("Unknown command or category name in ACL"));
    assert!(err(&mut acl, "+config|get|x").ends_with("first-arg of a subcommand is not supported"));
    assert!(err(&mut acl, "+config|").ends_with("Syntax error"));
    assert!(err(&mut acl, "-select|0").ends_with("Unknown command or category name in ACL"));
    assert!(err(&mut acl, "#abc").ends_with("only lowercase hexadecimal characters"));
    assert!(err(&mut acl, "<nothere").ends_with("does not exist"));
    assert!(err(&mut acl, "%X~a").ends_with("Syntax error"));
    // A failed SETUSER creates nothing.
    assert_eq!(acl.user_names(), vec!["default"]);
    acl.set_user(b"x", &[b"allkeys"]).unwrap();
    assert!(err(&mut acl, "~y").contains("'allkeys' flag"));
    assert_eq!(
        acl.set_user(b"a b", &[]).unwrap_err(),
        "Usernames can't contain spaces or null characters"
    );
}

fn who() -> Who {
    Who {
        addr: "127.0.0.1:1".into(),
        client_info: String::new(),
        now_ms: 0,
        in_multi: false,
        in_exec: false,
    }
}

#[test]
fn authentication_and_permissions() {
    let mut acl = Acl::new();
    acl.set_requirepass(b"sec");
    acl.set_user(b"app", &[b"on", b">pw", b"~app:*", b"+@all"])
        .unwrap();
    let mut auth = acl.default_auth();
    assert!(!auth.authenticated);
    let get = command::lookup(b"get").unwrap();
    let set = command::lookup(b"set").unwrap();
    let ping = command::lookup(b"auth").unwrap();
    assert_eq!(acl.check(&auth, get, &[b"get", b"k"]), Err(Denied::NoAuth));
    assert_eq!(acl.check(&auth, ping, &[b"auth", b"x"]), Ok(()));
    assert!(!acl.authenticate(&mut auth, b"app", b"bad", &who()));
    assert_eq!(acl.stats.denied_auth, 1);
    let mut events = Vec::new();
    acl.take_security_events(&mut events);
    assert_eq!(events, vec!["Failed AUTH for user 'app' from 127.0.0.1:1"]);
    assert!(acl.authenticate(&mut auth, b"app", b"pw", &who()));
    assert_eq!(auth.name(), "app");
    assert_eq!(acl.check(&auth, get, &[b"get", b"app:1"]), Ok(()));
    assert_eq!(
        acl.check(&auth, set, &[b"set", b"other:1", b"v"]),
        Err(Denied::Key(1))
    );
    let mget = command::lookup(b"mget").unwrap();
    assert_eq!(
        acl.check(&auth, mget, &[b"mget", b"app:1", b"other:2"]),
        Err(Denied::Key(2))
    );
    // Read-only pattern: GET passes, SET does not.
    acl.set_user(b"ro", &[b"on", b"nopass", b"%R~r:*", b"+@all"])
        .unwrap();
    assert!(acl.authenticate(&mut auth, b"ro", b"", &who()));
    assert_eq!(acl.check(&auth, get, &[b"get", b"r:1"]), Ok(()));
    assert_eq!(
        acl.check(&auth, set, &[b"set", b"r:1", b"v"]),
        Err(Denied::Key(1))
    );
    // Commands and first args.
    acl.set_user(b"c", &[b"on", b"nopass", b"allkeys", b"+get", b"+select|0"])
        .unwrap();
    assert!(acl.authenticate(&mut auth, b"c", b"", &who()));
    let select = command::lookup(b"select").unwrap();
    assert_eq!(acl.check(&auth, get, &[b"get", b"x"]), Ok(()));
    assert_eq!(
        acl.check(&auth, set, &[b"set", b"x", b"v"]),
        Err(Denied::Command)
    );
    assert_eq!(acl.check(&auth, select, &[b"select", b"0"]), Ok(()));
    assert_eq!(
        acl.check(&auth, select, &[b"select", b"1"]),
        Err(Denied::Command)
    );
    // A deleted user's connection is closed.
    assert_eq!(acl.delete_users(&[b"c", b"nobody"]), Ok(1));
    assert_eq!(
        acl.check(&auth, get, &[b"get", b"x"]),
        Err(Denied::UserGone)
    );
    // ... even once only an open default user is left.
    let mut open = Acl::new();
    open.set_user(b"t", &[b"on", b"nopass", b"allkeys", b"+@all"])
        .unwrap();
    let mut t = open.default_auth();
    assert!(open.authenticate(&mut t, b"t", b"", &who()));
    assert_eq!(open.delete_users(&[b"t"]), Ok(1));
    assert!(open.restricted());
    assert_eq!(open.check(&t, get, &[b"get", b"x"]), Err(Denied::UserGone));
    // Disabled users cannot authenticate.
    acl.set_user(b"app", &[b"off"]).unwrap();
    assert!(!acl.authenticate(&mut auth, b"app", b"pw", &who()));
}

#[test]
fn channels() {
    let mut acl = Acl::new();
    acl.set_user(b"p", &[b"on", b"nopass", b"+@all", b"&news.*"])
        .unwrap();
    let mut auth = acl.default_auth();
    assert!(acl.authenticate(&mut auth, b"p", b"", &who()));
    let publish = command::lookup(b"publish").unwrap();
    let psub = command::lookup(b"psubscribe").unwrap();
    assert_eq!(
        acl.check(&auth, publish, &[b"publish", b"news.1", b"m"]),
        Ok(())
    );
    assert_eq!(
        acl.check(&auth, publish, &[b"publish", b"x", b"m"]),
        Err(Denied::Channel(1))
    );
    assert_eq!(acl.check(&auth, psub, &[b"psubscribe", b"news.*"]), Ok(()));
    assert_eq!(
        acl.check(&auth, psub, &[b"psubscribe", b"news.1*"]),
        Err(Denied::Channel(1))
    );
}

#[test]
fn dryrun_texts() {
    let mut acl = Acl::new();
    acl.set_user(b"al", &[b"on", b"~app:*", b"+@read"]).unwrap();
    assert_eq!(
        dryrun(&acl, &[b"al", b"get", b"x"]).unwrap().unwrap(),
        "This user has no permissions to access the 'x' key"
    );
    assert_eq!(
        dryrun(&acl, &[b"al", b"set", b"app:x", b"1"])
            .unwrap()
            .unwrap(),
        "This user has no permissions to run the 'set' command"
    );
    assert_eq!(dryrun(&acl, &[b"al", b"get", b"app:x"]).unwrap(), None);
    assert!(dryrun(&acl, &[b"nobody", b"get", b"x"]).is_err());
    assert!(dryrun(&acl, &[b"al", b"nocmd"]).is_err());
}
