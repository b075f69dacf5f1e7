//! `recached`: the one binary (skeleton).
fn main() {}
