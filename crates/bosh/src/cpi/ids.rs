//! CPI request IDs, in the director's format.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// A request ID in the director's format, `cpi-<6 digits>`; unique within this process for
/// 900 000 consecutive calls (a random start, then counting).
pub fn request_id() -> String {
    static NEXT: LazyLock<AtomicU32> = LazyLock::new(|| {
        let b = kubosh_base::ids::random_bytes(4);
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
