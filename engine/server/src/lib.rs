//! The recached engine process (skeleton).
