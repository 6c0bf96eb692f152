fn main() {
    let args: Vec<String> = std::env::args().collect();
    let read =
        |p: &str| kubosh::yaml::parse_value(&std::fs::read_to_string(p).unwrap(), p).unwrap();
    match kubosh::validate::deployment(&read(&args[1]), &read(&args[2])) {
        Ok(v) => print!("OK\n{}", v.warnings),
        Err(p) => print!("{p}"),
    }
}
