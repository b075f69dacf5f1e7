//! The nodes file of a cluster engine, `<dir>/nodes-<port>.conf` (format:
//! `engine_core::cmd::cluster::conf`): loaded at start, rewritten whenever a CLUSTER command
//! changes the slot table, before that command's reply is sent (redis saves `nodes.conf` in
//! `beforeSleep` likewise), so a restarted engine keeps a slot it acknowledged.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use engine_core::Engine;
use log::{info, warn};

/// `<dir>/nodes-<port>.conf`.
pub fn path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("nodes-{port}.conf"))
}

/// Adopts `path` if it exists and names this engine. A file of another address (another
/// layout) is ignored with a warning; a malformed one stops the start, as in Redis (serving
/// with a guessed table could give a slot two owners).
pub fn load_at_start(engine: &mut Engine, path: &Path) -> io::Result<()> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match engine.load_cluster_conf(&text) {
        Ok(()) => {
            info!("cluster: slot table loaded from {}", path.display());
            Ok(())
        }
        Err(e) if e.contains("but this engine is") => {
            warn!("cluster: {} ignored: {e}", path.display());
            Ok(())
        }
        Err(e) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unreadable nodes file {}: {e}", path.display()),
        )),
    }
}

/// The open nodes file, rewritten in place on every change.
pub struct NodesFile {
    path: PathBuf,
    file: Option<File>,
    /// Bytes in the file now.
    len: usize,
}

impl NodesFile {
    pub fn new(path: PathBuf) -> NodesFile {
        NodesFile {
            path,
            file: None,
            len: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `text` over the file in place, as redis `clusterSaveConfig` does: a shorter text
    /// is padded with newlines to the old length before the file is cut to size, so a crash
    /// between the write and the cut leaves blank lines (skipped when read), never the tail
    /// of an older table. No fsync: redis does not fsync `nodes.conf` after SETSLOT either
    /// (`CLUSTER_TODO_SAVE_CONFIG` without `…_FSYNC_CONFIG`), and a slot move sends four
    /// SETSLOTs per slot; a process crash keeps the change, a power loss may lose the last
    /// one. One `pwrite` (and an `ftruncate` when shorter): no file is created per change.
    pub fn save(&mut self, text: &str) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)?;
            self.len = f.metadata()?.len() as usize;
            self.file = Some(f);
        }
        let f = self.file.as_ref().expect("opened above");
        let mut bytes = text.as_bytes().to_vec();
        if bytes.len() < self.len {
            bytes.resize(self.len, b'\n');
        }
        let r = f
            .write_all_at(&bytes, 0)
            .and_then(|()| f.set_len(text.len() as u64));
        if r.is_err() {
            self.file = None; // reopened on the next change
        }
        r?;
        self.len = text.len();
        Ok(())
    }
}

/// Writes `text` to `path` once (a new file: temp file, then rename).
pub fn save(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("conf.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_table_is_loaded_back_and_a_foreign_one_ignored() {
        let dir = std::env::temp_dir().join(format!("recached-nodes-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let nodes = vec!["127.0.0.1:7000".to_string(), "127.0.0.1:7001".to_string()];
        let engine = |i| {
            Engine::new(engine_core::Config {
                cluster_nodes: nodes.clone(),
                cluster_index: i,
                ..Default::default()
            })
        };
        let e0 = engine(0);
        let p = path(&dir, 7000);
        save(&p, &e0.cluster().to_conf()).unwrap();
        let mut again = engine(0);
        load_at_start(&mut again, &p).unwrap();
        assert_eq!(again.cluster().to_conf(), e0.cluster().to_conf());
        // Engine 1 given engine 0's file: ignored, its own table kept.
        let mut other = engine(1);
        let before = other.cluster().to_conf();
        load_at_start(&mut other, &p).unwrap();
        assert_eq!(other.cluster().to_conf(), before);
        // Rewritten in place: a shorter table leaves no tail of the longer one.
        let mut file = NodesFile::new(p.clone());
        let mut e1 = engine(0);
        let mut c = engine_core::Client::default();
        let mut out = Vec::new();
        e1.exec(
            &mut c,
            &[b"CLUSTER", b"MEET", b"127.0.0.1", b"7002"],
            0,
            &mut out,
        );
        file.save(&e1.cluster().to_conf()).unwrap();
        file.save(&e0.cluster().to_conf()).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), e0.cluster().to_conf());
        fs::write(&p, "garbage\n").unwrap();
        assert!(load_at_start(&mut engine(0), &p).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
