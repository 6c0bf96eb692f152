//! Random identifiers: CPI request IDs and cloud IDs.

use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// `n` random bytes from the kernel (`/dev/urandom`), or — if that cannot be read — from the
/// standard library's per-process random hasher keys mixed with the time and a counter.
pub(crate) fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let from_kernel = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if from_kernel.is_err() {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
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

/// A random (version 4) UUID, e.g. `3b241101-e2bb-4255-8caf-4136c566a962`.
pub(crate) fn uuid_v4() -> String {
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

/// A request ID in the director's format, `cpi-<6 digits>`; unique within this process for
/// 900 000 consecutive calls (a random start, then counting).
pub(crate) fn request_id() -> String {
    static NEXT: LazyLock<AtomicU32> = LazyLock::new(|| {
        let b = random_bytes(4);
        AtomicU32::new(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) % 900_000)
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % 900_000;
    format!("cpi-{}", 100_000 + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_have_the_directors_shape_and_do_not_repeat() {
        let ids: Vec<String> = (0..1000).map(|_| request_id()).collect();
        for id in &ids {
            let digits = id.strip_prefix("cpi-").unwrap();
            assert_eq!(digits.len(), 6, "{id}");
            assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{id}");
        }
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn uuids_are_version_4() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(uuid_v4(), u);
    }
}
