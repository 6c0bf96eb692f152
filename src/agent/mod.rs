//! The BOSH agent protocol, director side (`bosh-protocols.md` §2): the wire types
//! ([`protocol`]), a transport-independent client with a typed method per agent action
//! ([`client`]), and its two transports: NATS with mutual TLS ([`nats`]) and the
//! create-env HTTPS mbus with the agent's blobstore ([`https`]).
//!
//! This is a protocol edge: no Kubernetes here. The agent's settings (what a CPI hands to a
//! new VM) live in a sibling module.

pub mod client;
pub mod https;
pub mod nats;
pub mod protocol;
pub mod tls;

pub use client::{
    AgentClient, AgentError, ClientOptions, Method, Mode, Started, Transport, TransportError,
};
pub use https::{HttpsError, HttpsTransport};
pub use nats::{Heartbeats, MbusTls, NatsError, NatsOptions, NatsTransport, heartbeats};

/// A random (version 4) UUID in its usual text form, from the system's secure random source.
pub fn new_uuid() -> String {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // The OS random source failing is not recoverable in any useful way; fall back to a
        // time-and-counter based value that is still unique within the process.
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        b[..8].copy_from_slice(&t.to_be_bytes());
        b[8..].copy_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(x >> 4)]));
        out.push(char::from(HEX[usize::from(x & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_v4_and_distinct() {
        let a = super::new_uuid();
        let b = super::new_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }
}
