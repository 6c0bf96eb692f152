//! Random identifiers: UUIDs for agents, VMs, blobs and requests, and tokens.
//!
//! One source of randomness for the whole crate: the operating system's secure random source
//! (through `ring`), with a process-unique fallback should it ever fail.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use ring::rand::SecureRandom as _;

/// `n` random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    if ring::rand::SystemRandom::new().fill(&mut buf).is_err() {
        // Not secret-grade, but unique within the process: the OS source failing is not
        // recoverable in any better way.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for chunk in buf.chunks_mut(8) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let word = RandomState::new().hash_one((
                now,
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed),
            ));
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
    }
    buf
}

/// `n` random bytes as lowercase hex (a token of `2n` characters).
pub fn random_hex(n: usize) -> String {
    random_bytes(n).iter().map(|b| format!("{b:02x}")).collect()
}

/// A random (version 4) UUID in its usual text form, e.g. `3b241101-e2bb-4255-8caf-4136c566a962`.
pub fn uuid_v4() -> String {
    let mut b = random_bytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4_and_distinct() {
        let a = uuid_v4();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid_v4(), a);
    }

    #[test]
    fn tokens_are_hex_of_the_asked_length() {
        let t = random_hex(24);
        assert_eq!(t.len(), 48);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(random_hex(24), t);
    }
}
