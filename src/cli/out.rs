//! Printing a command's result on stdout the way pipes expect. `print!` panics when the
//! reader went away (`kubosh interpolate big.yml | head -c 10`); a Unix tool there ends
//! quietly, and so does kubosh: the rest of the output has no reader, and the command's
//! work is done (these are the results printed last, never progress of work under way).

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Writes `text` to stdout; a closed stdout ends the process quietly with success, any
/// other write error with failure after saying so on stderr.
pub(super) fn print(text: Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("kubosh: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes a line about work under way (`Using deployment`, `Task N`): a closed stdout
/// must not stop the work, so a failed write is dropped, as the task's own lines are.
pub(super) fn progress(text: Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(text).and_then(|()| out.flush());
}

/// `print!` that ends quietly when stdout's reader went away ([`print`]).
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::print(format_args!($($arg)*)) };
}

/// `println!` that ends quietly when stdout's reader went away ([`print`]).
macro_rules! outln {
    () => { $crate::cli::out::print(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::cli::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(super) use {out, outln};
