//! The `appliance` binary: parses the command line and hands over to the library.

/// The process's allocator: mimalloc (docs/decisions.md, "Runtime"). On this 2-core machine
/// kind glibc's malloc took about a fifth of the server's CPU under load, with its arena
/// locks contended between the runtime threads; mimalloc's thread-local free lists raised
/// mutating requests by about a fifth and reads by a fifth to a quarter
/// (docs/performance.md, "The allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    appliance::cli::main()
}
