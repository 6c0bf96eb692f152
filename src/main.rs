fn main() -> std::process::ExitCode {
    kubosh::cli::main()
}
