//! The `#!lua flags=…` first line of a script (redis `evalExtractShebangFlags`, 7.0).

/// Flags a script declares; a script without a shebang runs in compatibility mode (`compat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    pub compat: bool,
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

/// Parses the shebang of `body`: the flags and the length of the shebang line (without its
/// `\n`, which stays in the compiled source so line numbers hold), or Redis's error text
/// (without the `ERR ` code).
pub fn parse(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((
            ScriptFlags {
                compat: true,
                ..ScriptFlags::default()
            },
            0,
        ));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let parts: Vec<&str> = line.split_ascii_whitespace().collect();
    let Some(engine) = parts.first() else {
        return Err("Invalid engine in script shebang".into());
    };
    if *engine != "#!lua" {
        return Err(format!("Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = ScriptFlags::default();
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("Unknown lua shebang option: {part}"));
        };
        if list.is_empty() {
            continue;
        }
        for f in list.split(',') {
            match f {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-stale" => flags.allow_stale = true,
                "no-cluster" => flags.no_cluster = true,
                "allow-cross-slot-keys" => flags.allow_cross_slot_keys = true,
                _ => return Err(format!("Unexpected flag in script shebang: {f}")),
            }
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs() {
        assert!(parse(b"return 1").unwrap().0.compat);
        let (f, n) = parse(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.no_writes && f.allow_oom && !f.compat);
        assert_eq!(n, 31);
        assert_eq!(parse(b"#!lua").unwrap_err(), "Invalid script shebang");
        assert_eq!(
            parse(b"#!lux\n").unwrap_err(),
            "Unexpected engine in script shebang: #!lux"
        );
        assert_eq!(
            parse(b"#!lua flags=bad\n").unwrap_err(),
            "Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            parse(b"#!lua name=x\n").unwrap_err(),
            "Unknown lua shebang option: name=x"
        );
        assert!(parse(b"#!lua flags=\n").is_ok());
    }
}
