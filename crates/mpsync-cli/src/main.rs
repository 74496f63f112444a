//! `mpsync` — the experiment harness (STUB: being implemented).
mod osmp;

fn main() {}
