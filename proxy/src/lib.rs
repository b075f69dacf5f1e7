//! The recached proxy (skeleton).
