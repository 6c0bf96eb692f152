//! RSA keys made ahead on the machine's other cores. Key generation is most of the time a
//! vars store's first fill takes (cf-deployment's certificates each want a 3072-bit key),
//! and the definitions are generated one after another (a certificate needs its CA first),
//! but their keys need nothing: while one definition is generated, the keys of the next
//! ones are made on other threads, in the order they will be asked for.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use kubosh_base::pki::{PkiError, RsaKey};

/// Where the generators get their RSA keys: made now, or made ahead ([`KeyMaker::ahead`]).
pub struct KeyMaker {
    shared: Option<Arc<Mutex<Ahead>>>,
}

/// The keys still to make ahead (sizes in bits, in the order they will be asked for) and
/// those made, by size.
#[derive(Default)]
struct Ahead {
    pending: VecDeque<usize>,
    ready: HashMap<usize, Vec<RsaKey>>,
    stopped: bool,
}

impl KeyMaker {
    /// Keys made when asked for, on the caller's thread.
    pub const fn inline() -> KeyMaker {
        KeyMaker { shared: None }
    }

    /// Keys of `sizes` (bits, in the order they will be asked for) made ahead by a thread
    /// per core but one (the caller's thread makes keys too, when none is ready). Keys made
    /// and never asked for are dropped with the maker; threads still making one stop after it.
    pub fn ahead(sizes: Vec<usize>) -> KeyMaker {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let workers = cores.saturating_sub(1).min(sizes.len().saturating_sub(1));
        if workers == 0 {
            return KeyMaker::inline();
        }
        let shared = Arc::new(Mutex::new(Ahead {
            pending: sizes.into(),
            ..Ahead::default()
        }));
        for _ in 0..workers {
            let shared = shared.clone();
            // Detached: a worker holds nothing but the shared queue, and ends with it.
            std::thread::spawn(move || make_ahead(&shared));
        }
        KeyMaker {
            shared: Some(shared),
        }
    }

    /// A key of `bits`: one made ahead if one is ready, else one made now (and one fewer of
    /// that size made ahead).
    pub fn key(&self, bits: usize) -> Result<RsaKey, PkiError> {
        if let Some(shared) = &self.shared {
            let mut ahead = shared.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(key) = ahead.ready.get_mut(&bits).and_then(Vec::pop) {
                return Ok(key);
            }
            if let Some(at) = ahead.pending.iter().position(|&b| b == bits) {
                ahead.pending.remove(at);
            }
        }
        RsaKey::generate(bits)
    }
}

impl Drop for KeyMaker {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            let mut ahead = shared.lock().unwrap_or_else(PoisonError::into_inner);
            ahead.stopped = true;
            ahead.pending.clear();
            ahead.ready.clear();
        }
    }
}

/// A worker: makes the next pending key until none is left or the maker is gone. A key
/// that fails to generate is left to the caller, who makes it again and sees the error.
fn make_ahead(shared: &Mutex<Ahead>) {
    loop {
        let bits = {
            let mut ahead = shared.lock().unwrap_or_else(PoisonError::into_inner);
            match ahead.pending.pop_front() {
                Some(bits) if !ahead.stopped => bits,
                _ => return,
            }
        };
        let Ok(key) = RsaKey::generate(bits) else {
            continue;
        };
        let mut ahead = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if ahead.stopped {
            return;
        }
        ahead.ready.entry(bits).or_default().push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_made_ahead_are_handed_out_once_each_and_of_the_size_asked() {
        let maker = KeyMaker::ahead(vec![1024, 1024, 2048, 1024]);
        let mut moduli = Vec::new();
        for bits in [1024, 1024, 2048, 1024] {
            let key = maker.key(bits).unwrap();
            assert_eq!(key.bits(), bits);
            moduli.push(key.modulus_sha1());
        }
        moduli.sort();
        moduli.dedup();
        assert_eq!(moduli.len(), 4, "no key handed out twice");
        // More than was made ahead: made now.
        assert_eq!(maker.key(1024).unwrap().bits(), 1024);
        assert_eq!(KeyMaker::inline().key(1024).unwrap().bits(), 1024);
    }
}
