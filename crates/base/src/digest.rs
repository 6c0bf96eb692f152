//! BOSH multi-digests: `<sha1 hex>`, `sha256:<hex>`, `sha512:<hex>`, several joined with `;`
//! (bosh-utils `crypto/multiple_digest.go`).
//!
//! Parsing follows bosh-utils: empty pieces are skipped, algorithm and value must be
//! alphanumeric, a piece without `algorithm:` is sha1, an algorithm may appear only once, and
//! an unknown algorithm parses but cannot be verified. Verification uses the strongest
//! digest present (sha512, then sha256, then sha1), as the agent does. Hex is compared
//! case-insensitively.
//!
//! Hashing uses the RustCrypto `sha1` and `sha2` crates: pure Rust, no C toolchain or system
//! library, streaming (`Digest::update`), and the de facto standard implementations.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use sha1::Digest as _;

/// A hash algorithm a BOSH digest can name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `sha1` (also digests without a prefix).
    Sha1,
    /// `sha256`.
    Sha256,
    /// `sha512`.
    Sha512,
    /// Any other name: parses, never verifies.
    Unknown(String),
}

impl Algorithm {
    /// The name used in digest strings.
    pub fn name(&self) -> &str {
        match self {
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
            Self::Unknown(n) => n,
        }
    }

    fn strength(&self) -> u8 {
        match self {
            Self::Sha512 => 3,
            Self::Sha256 => 2,
            Self::Sha1 => 1,
            Self::Unknown(_) => 0,
        }
    }
}

/// One digest: an algorithm and a hex value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The value, hex as given.
    pub hex: String,
}

impl fmt::Display for Digest {
    /// sha1 without prefix (as BOSH writes it), others as `algorithm:hex`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.algorithm {
            Algorithm::Sha1 => f.write_str(&self.hex),
            _ => write!(f, "{}:{}", self.algorithm.name(), self.hex),
        }
    }
}

/// A digest string that does not parse, or data that does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// Nothing but empty pieces.
    #[error("no digest algorithm found in {0:?}. Supported algorithms: sha1, sha256, sha512")]
    Empty(String),
    /// A piece with characters other than letters and digits.
    #[error(
        "unable to parse digest string {0:?}: digest and algorithm key can only contain alpha-numeric characters"
    )]
    Malformed(String),
    /// The same algorithm twice.
    #[error("multiple digests of the same algorithm '{algorithm}' found in digests '{digests}'")]
    Duplicate {
        /// The repeated algorithm.
        algorithm: String,
        /// The whole digest string.
        digests: String,
    },
    /// Only algorithms this agent cannot compute.
    #[error("cannot verify digest '{0}': unknown algorithm")]
    UnknownAlgorithm(String),
    /// The data hashes to something else.
    #[error("expected stream to have digest '{expected}' but was '{actual}'")]
    Mismatch {
        /// The digest that was expected.
        expected: String,
        /// The digest of the data, same algorithm.
        actual: String,
    },
    /// Reading the data failed.
    #[error("reading data to digest: {0}")]
    Read(String),
}

/// A parsed multi-digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiDigest {
    digests: Vec<Digest>,
}

impl FromStr for MultiDigest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let alnum = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric());
        let mut digests: Vec<Digest> = Vec::new();
        for piece in s.split(';').filter(|p| !p.is_empty()) {
            let (algo, hex) = match piece.split_once(':') {
                Some((a, h)) => (a, h),
                None => ("sha1", piece),
            };
            if !alnum(algo) || !alnum(hex) {
                return Err(DigestError::Malformed(piece.to_string()));
            }
            let algorithm = match algo {
                "sha1" => Algorithm::Sha1,
                "sha256" => Algorithm::Sha256,
                "sha512" => Algorithm::Sha512,
                other => Algorithm::Unknown(other.to_string()),
            };
            if digests.iter().any(|d| d.algorithm == algorithm) {
                return Err(DigestError::Duplicate {
                    algorithm: algorithm.name().to_string(),
                    digests: s.to_string(),
                });
            }
            digests.push(Digest {
                algorithm,
                hex: hex.to_string(),
            });
        }
        if digests.is_empty() {
            return Err(DigestError::Empty(s.to_string()));
        }
        Ok(Self { digests })
    }
}

impl fmt::Display for MultiDigest {
    /// The canonical string: each digest as BOSH writes it, joined with `;`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.digests.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl MultiDigest {
    /// The digests, in the order given.
    pub fn digests(&self) -> &[Digest] {
        &self.digests
    }

    /// The digest verification uses: sha512, else sha256, else sha1, else the first.
    pub fn strongest(&self) -> &Digest {
        // A MultiDigest always holds at least one digest (FromStr guarantees it).
        let mut best = &self.digests[0];
        for d in &self.digests {
            if d.algorithm.strength() > best.algorithm.strength() {
                best = d;
            }
        }
        best
    }

    /// Checks `data` against the strongest digest.
    pub fn verify(&self, data: &[u8]) -> Result<(), DigestError> {
        self.verify_reader(data)
    }

    /// Checks everything `reader` yields against the strongest digest.
    pub fn verify_reader(&self, reader: impl Read) -> Result<(), DigestError> {
        let expected = self.strongest();
        let actual = hash_reader(&expected.algorithm, reader)?;
        if actual.eq_ignore_ascii_case(&expected.hex) {
            Ok(())
        } else {
            Err(DigestError::Mismatch {
                expected: expected.to_string(),
                actual: Digest {
                    algorithm: expected.algorithm.clone(),
                    hex: actual,
                }
                .to_string(),
            })
        }
    }
}

/// An incremental check of data against a [`MultiDigest`] (its strongest digest), for data
/// that arrives in pieces, e.g. a download streamed to a file.
pub struct Verifier {
    expected: Digest,
    state: HashState,
}

enum HashState {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl MultiDigest {
    /// A [`Verifier`] for the strongest digest; an error if that algorithm is unknown.
    pub fn verifier(&self) -> Result<Verifier, DigestError> {
        let expected = self.strongest().clone();
        let state = match &expected.algorithm {
            Algorithm::Sha1 => HashState::Sha1(sha1::Sha1::new()),
            Algorithm::Sha256 => HashState::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => HashState::Sha512(sha2::Sha512::new()),
            Algorithm::Unknown(name) => return Err(DigestError::UnknownAlgorithm(name.clone())),
        };
        Ok(Verifier { expected, state })
    }
}

impl Verifier {
    /// Feeds the next piece of data.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            HashState::Sha1(h) => h.update(data),
            HashState::Sha256(h) => h.update(data),
            HashState::Sha512(h) => h.update(data),
        }
    }

    /// Checks everything fed so far.
    pub fn finish(self) -> Result<(), DigestError> {
        let actual = match self.state {
            HashState::Sha1(h) => to_hex(&h.finalize()),
            HashState::Sha256(h) => to_hex(&h.finalize()),
            HashState::Sha512(h) => to_hex(&h.finalize()),
        };
        if actual.eq_ignore_ascii_case(&self.expected.hex) {
            Ok(())
        } else {
            Err(DigestError::Mismatch {
                expected: self.expected.to_string(),
                actual: Digest {
                    algorithm: self.expected.algorithm,
                    hex: actual,
                }
                .to_string(),
            })
        }
    }
}

fn hash_reader(algorithm: &Algorithm, mut reader: impl Read) -> Result<String, DigestError> {
    fn run<H: sha1::Digest>(mut h: H, r: &mut dyn Read) -> Result<String, DigestError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = r
                .read(&mut buf)
                .map_err(|e| DigestError::Read(e.to_string()))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(to_hex(&h.finalize()))
    }
    match algorithm {
        Algorithm::Sha1 => run(sha1::Sha1::new(), &mut reader),
        Algorithm::Sha256 => run(sha2::Sha256::new(), &mut reader),
        Algorithm::Sha512 => run(sha2::Sha512::new(), &mut reader),
        Algorithm::Unknown(name) => Err(DigestError::UnknownAlgorithm(name.clone())),
    }
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// sha1 of `data`, lowercase hex.
pub fn sha1_hex(data: &[u8]) -> String {
    to_hex(&sha1::Sha1::digest(data))
}

/// sha256 of `data`, lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    to_hex(&sha2::Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_bosh_utils() {
        let d: MultiDigest = "abc123".parse().unwrap();
        assert_eq!(d.strongest().algorithm, Algorithm::Sha1);
        let d: MultiDigest = "sha1:abc;sha256:def;".parse().unwrap();
        assert_eq!(d.strongest().algorithm, Algorithm::Sha256);
        assert_eq!(d.to_string(), "abc;sha256:def");
        assert!(matches!(
            "".parse::<MultiDigest>(),
            Err(DigestError::Empty(_))
        ));
        assert!(matches!(
            "sha1:a;b".parse::<MultiDigest>(),
            Err(DigestError::Duplicate { .. })
        ));
        assert!(matches!(
            "sha256:ab-c".parse::<MultiDigest>(),
            Err(DigestError::Malformed(_))
        ));
        let d: MultiDigest = "md5:abc".parse().unwrap();
        assert!(matches!(
            d.verify(b""),
            Err(DigestError::UnknownAlgorithm(_))
        ));
    }

    #[test]
    fn verifies_the_strongest() {
        let data = b"hello";
        let sha1 = sha1_hex(data);
        let sha256 = sha256_hex(data);
        assert_eq!(sha1, "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d");
        let ok: MultiDigest = format!("{sha1};sha256:{sha256}").parse().unwrap();
        ok.verify(data).unwrap();
        let upper: MultiDigest = sha1.to_uppercase().parse().unwrap();
        upper.verify(data).unwrap();
        // A wrong sha1 next to a right sha256: only sha256 is checked.
        let weak_wrong: MultiDigest = format!("{};sha256:{sha256}", "0".repeat(40))
            .parse()
            .unwrap();
        weak_wrong.verify(data).unwrap();
        let strong_wrong: MultiDigest =
            format!("{sha1};sha256:{}", "0".repeat(64)).parse().unwrap();
        let err = strong_wrong.verify(data).unwrap_err();
        assert!(err.to_string().contains(&sha256), "{err}");
        // The incremental verifier agrees, whatever the pieces.
        let mut v = ok.verifier().unwrap();
        v.update(b"he");
        v.update(b"llo");
        v.finish().unwrap();
        let mut v = strong_wrong.verifier().unwrap();
        v.update(data);
        assert!(matches!(v.finish(), Err(DigestError::Mismatch { .. })));
        let unknown: MultiDigest = "md5:abc".parse().unwrap();
        assert!(unknown.verifier().is_err());
    }
}
