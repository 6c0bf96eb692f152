//! The `kubosh` command line: the thin binary over the workspace's crates.

mod cli;

/// mimalloc instead of the system allocator: a deploy allocates and frees many small JSON
/// values and strings from several threads at once, and glibc's malloc spent half of the
/// controller's CPU on that under load (its arena locks, fast-bin consolidation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
