//! Redis 7.0 functions' bookkeeping (redis `functions.c`): libraries, their functions, the
//! library metadata line (`#!lua name=<lib>`), and FUNCTION DUMP/RESTORE payloads.
//!
//! The Lua side (compiling a library, `redis.register_function`, FCALL) is in lib.rs; this
//! module holds no Lua state beyond the compiled callbacks.

use std::collections::{BTreeMap, HashMap};

use engine_core::dump::rdb;
use mlua::Function;

use crate::shebang::ScriptFlags;

/// A registered function.
pub struct Func {
    /// The name as registered (FCALL finds it case-insensitively).
    pub name: String,
    pub callback: Function,
    pub flags: ScriptFlags,
    pub desc: Option<Vec<u8>>,
}

/// A loaded library.
pub struct Library {
    /// The whole FUNCTION LOAD payload, shebang included (LIST WITHCODE, DUMP).
    pub code: Vec<u8>,
    /// By name (case-sensitive within a library).
    pub functions: BTreeMap<String, Func>,
}

/// The libraries of an engine (redis `functionsLibCtx`).
#[derive(Default)]
pub struct Libraries {
    /// By library name (case-sensitive).
    pub libs: BTreeMap<String, Library>,
    /// Lowercased function name → library name (redis' functions dict is case-insensitive).
    pub index: HashMap<String, String>,
}

impl Libraries {
    /// The function FCALL names, if any.
    pub fn find(&self, name: &[u8]) -> Option<&Func> {
        let key = String::from_utf8_lossy(name).to_lowercase();
        let lib = self.index.get(&key)?;
        self.libs[lib]
            .functions
            .values()
            .find(|f| f.name.to_lowercase() == key)
    }

    pub fn function_count(&self) -> usize {
        self.index.len()
    }

    /// Adds `lib` (no library of that name may be present).
    pub fn link(&mut self, name: String, lib: Library) {
        for f in lib.functions.values() {
            self.index.insert(f.name.to_lowercase(), name.clone());
        }
        self.libs.insert(name, lib);
    }

    /// Removes and returns a library.
    pub fn unlink(&mut self, name: &str) -> Option<Library> {
        let lib = self.libs.remove(name)?;
        for f in lib.functions.values() {
            self.index.remove(&f.name.to_lowercase());
        }
        Some(lib)
    }

    /// The first function of `lib` whose name another library already has.
    pub fn collision<'a>(&self, lib: &'a Library) -> Option<&'a str> {
        lib.functions
            .values()
            .find(|f| self.index.contains_key(&f.name.to_lowercase()))
            .map(|f| f.name.as_str())
    }

    /// redis `libraryJoin`: moves every library of `src` in; on a library name collision
    /// fails (`replace` false) or replaces, then fails if a function name collides. On
    /// failure nothing changed.
    pub fn join(&mut self, src: Libraries, replace: bool) -> Result<(), String> {
        let mut old = Vec::new();
        for name in src.libs.keys() {
            if self.libs.contains_key(name) {
                if !replace {
                    return Err(format!("Library {name} already exists"));
                }
                old.push((name.clone(), self.unlink(name).expect("present")));
            }
        }
        for lib in src.libs.values() {
            if let Some(f) = self.collision(lib) {
                let err = format!("Function {f} already exists");
                for (name, lib) in old {
                    self.link(name, lib);
                }
                return Err(err);
            }
        }
        for (name, lib) in src.libs {
            self.link(name, lib);
        }
        Ok(())
    }
}

/// redis `functionsVerifyName`: letters, digits and `_`, at least one.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The library metadata of a FUNCTION LOAD payload (redis `functionExtractLibMetaData`):
/// `(engine, name, offset of the code)`; the code keeps the shebang's `\n` so line numbers
/// hold.
pub fn metadata(payload: &[u8]) -> Result<(String, Vec<u8>, usize), String> {
    if !payload.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = payload.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let line = &payload[..end];
    let Some(parts) = resp::parse::split_line(line).filter(|p| !p.is_empty()) else {
        return Err("Invalid library metadata".into());
    };
    let engine = String::from_utf8_lossy(parts[0].get(2..).unwrap_or_default()).into_owned();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_vec());
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let Some(name) = name else {
        return Err("Library name was not given".into());
    };
    Ok((engine, name, end))
}

/// `RDB_OPCODE_FUNCTION2`: one library in a payload.
const OPCODE_FUNCTION2: u8 = 245;

/// FUNCTION DUMP: Redis's payload (RDB opcode + string per library, RDB version, CRC-64),
/// strings written uncompressed (the RDB primitives are engine-core's `dump`, DUMP's).
pub fn dump(libs: &Libraries) -> Vec<u8> {
    let mut out = Vec::new();
    for lib in libs.libs.values() {
        out.push(OPCODE_FUNCTION2);
        rdb::put_len(&mut out, lib.code.len() as u64);
        out.extend_from_slice(&lib.code);
    }
    out.extend_from_slice(&engine_core::dump::RDB_VERSION.to_le_bytes());
    let crc = rdb::crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The library payloads of a FUNCTION RESTORE payload, with Redis's error texts.
pub fn undump(data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if !engine_core::dump::verify(data) {
        return Err("DUMP payload version or checksum are wrong".into());
    }
    let mut r = rdb::Rd::new(&data[..data.len() - 10]);
    let mut libs = Vec::new();
    while !r.at_end() {
        if r.u8() != Ok(OPCODE_FUNCTION2) {
            return Err("given type is not a function".into());
        }
        let code = r
            .string()
            .map_err(|_| "Failed loading library payload".to_string())?;
        libs.push(code.into_owned());
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_rules() {
        assert_eq!(
            metadata(b"#!lua name=lib\nreturn 1").unwrap(),
            ("lua".into(), b"lib".to_vec(), 14)
        );
        assert_eq!(metadata(b"lua").unwrap_err(), "Missing library metadata");
        assert_eq!(metadata(b"#!lua").unwrap_err(), "Invalid library metadata");
        assert_eq!(
            metadata(b"#!lua\n").unwrap_err(),
            "Library name was not given"
        );
        assert_eq!(
            metadata(b"#!lua name=a x=y\n").unwrap_err(),
            "Invalid metadata value given: x=y"
        );
        assert_eq!(
            metadata(b"#!lua name=\"foo\"\n").unwrap().1,
            b"foo".to_vec()
        );
        assert_eq!(
            metadata(b"#!lua name=\"foo\n").unwrap_err(),
            "Invalid library metadata"
        );
        assert!(valid_name(b"a_B9") && !valid_name(b"a-b") && !valid_name(b""));
    }

    #[test]
    fn reads_a_redis_payload() {
        // `FUNCTION DUMP` of redis-server 7.0.15 (LZF-compressed code).
        let payload = b"\xf5\xc3@\x94@\xdd\x1f#!lua name=mylib\x0aredis.register_\x0bfunction('my@\x0b\x02', @\x06`\x12\x11keys, args) return`\x0c\x07[1] end)\xe0\x17J\x002\xe0\x16K\x1f'a somewhat longer string here t\x09o compress\xe0\x09\x08\x00' \x81\x01d)\x0a\x00\xe6\xcc\xed\xfau\x0b\xea\xc5";
        let libs = undump(payload).unwrap();
        assert_eq!(libs.len(), 1);
        let code = String::from_utf8(libs[0].clone()).unwrap();
        assert!(code.starts_with("#!lua name=mylib\nredis.register_function('myfunc', "));
        assert!(code.ends_with("compress compress compress' end)"));
        let mut bad = payload.to_vec();
        bad[5] ^= 1;
        assert_eq!(
            undump(&bad).unwrap_err(),
            "DUMP payload version or checksum are wrong"
        );
    }
}
