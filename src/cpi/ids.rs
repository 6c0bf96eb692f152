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
}
