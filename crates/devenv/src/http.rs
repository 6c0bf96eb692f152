//! A plain HTTP GET, to see a deployed job answer or read a controller's `/metrics`.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /` on `ip:port` (HTTP/1.0, a 2 s connect and 5 s read limit): the response body,
/// or `None` when nothing answered.
pub fn http_get(ip: &str, port: u16) -> Option<String> {
    http_request(ip, port, "/").map(|(_, body)| body)
}

/// `GET path` on `ip:port` (as [`http_get`]): the status code and the body.
pub fn http_request(ip: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::new(ip.parse::<IpAddr>().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
