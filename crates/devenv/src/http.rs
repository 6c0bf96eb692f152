//! A plain HTTP GET, to see a deployed job answer.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /` on `ip:port` (HTTP/1.0, a 2 s connect and 5 s read limit): the response body,
/// or `None` when nothing answered.
pub fn http_get(ip: &str, port: u16) -> Option<String> {
    let addr = SocketAddr::new(ip.parse::<IpAddr>().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}
