//! The loop's connections, by slab key (a connection's mio token is its key).
//!
//! A connection whose requests are executing is taken out of its slot ([`Conns::take`]) and
//! put back after ([`Conns::put`]), so that a script running past `busy-reply-threshold` can
//! have the others served from inside it while that one is left alone (redis
//! `protectClient`). A taken slot stays occupied: no new connection gets its key meanwhile,
//! and every accessor here skips it.

use recached_net::Slab;

use crate::conn::Conn;

#[derive(Default)]
pub struct Conns {
    slab: Slab<Option<Box<Conn>>>,
}

impl Conns {
    pub fn new() -> Conns {
        Conns::default()
    }

    /// Connections, taken ones included (`maxclients`, `connected_clients`).
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// The connection at `key`, unless the key is free or the connection is taken out.
    pub fn get_mut(&mut self, key: usize) -> Option<&mut Conn> {
        self.slab.get_mut(key)?.as_deref_mut()
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, &Conn)> {
        self.slab
            .iter()
            .filter_map(|(k, c)| Some((k, c.as_deref()?)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Conn)> {
        self.slab
            .iter_mut()
            .filter_map(|(k, c)| Some((k, c.as_deref_mut()?)))
    }

    /// Adds a connection; returns its key.
    pub fn insert(&mut self, conn: Conn) -> usize {
        self.slab.insert(Some(Box::new(conn)))
    }

    /// The key the next [`Conns::insert`] will use.
    pub fn vacant_key(&self) -> usize {
        self.slab.vacant_key()
    }

    /// Removes the connection at `key` (which must be present and not taken).
    pub fn remove(&mut self, key: usize) -> Box<Conn> {
        self.slab
            .remove(key)
            .expect("a connection is removed only while in its slot")
    }

    /// Whether the connection at `key` is taken out.
    pub fn is_taken(&self, key: usize) -> bool {
        self.slab.get(key).is_some_and(|c| c.is_none())
    }

    /// Takes the connection at `key` out of its slot (see the module docs).
    pub fn take(&mut self, key: usize) -> Box<Conn> {
        self.slab[key].take().expect("connection taken twice")
    }

    /// Puts back what [`Conns::take`] took.
    pub fn put(&mut self, key: usize, conn: Box<Conn>) {
        // The slot holds `None` (taken): nothing to drop, and no drop call on this hot path.
        let empty = self.slab[key].replace(conn);
        debug_assert!(empty.is_none());
        std::mem::forget(empty);
    }
}

impl std::ops::Index<usize> for Conns {
    type Output = Conn;
    fn index(&self, key: usize) -> &Conn {
        self.slab[key].as_deref().expect("connection present")
    }
}

impl std::ops::IndexMut<usize> for Conns {
    fn index_mut(&mut self, key: usize) -> &mut Conn {
        self.slab[key].as_deref_mut().expect("connection present")
    }
}
