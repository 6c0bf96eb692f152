//! A small certificate authority: the CA and leaf certificates kubosh needs for its own test
//! and development environments (apiserver serving certs, NATS mutual TLS), and the RSA keys
//! and RSA-signed certificates BOSH variables are made of ([`RsaKey`], [`sign_with_rsa`]).
//!
//! RSA keys are generated with the `rsa` crate: rcgen's `ring` backend can sign with RSA keys
//! but cannot generate them, so the key is handed to rcgen as PKCS#8.

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;

/// A failure to generate, read or use a key or certificate. Texts never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused (bad parameters, unusable key).
    #[error("cannot generate certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// RSA key generation or encoding failed.
    #[error("cannot generate RSA key: {0}")]
    Rsa(String),
    /// A PEM text is not a key or certificate of the expected kind.
    #[error("{0}")]
    Parse(String),
}

/// A certificate authority that signs leaf certificates: a fresh self-signed one
/// ([`Ca::new`]) or an existing one read from PEM ([`Ca::from_pem`]). `Debug` never prints
/// the key.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Default)]
pub struct Leaf<'a> {
    /// Subject common name.
    pub common_name: &'a str,
    /// Subject organizations (Kubernetes reads them as groups).
    pub organizations: &'a [&'a str],
    /// DNS names and IP addresses (strings that parse as IPs become IP SANs).
    pub alternative_names: &'a [&'a str],
    /// Usable as a TLS server certificate.
    pub server: bool,
    /// Usable as a TLS client certificate.
    pub client: bool,
}

impl<'a> Leaf<'a> {
    /// A server certificate for `common_name` that is valid for `127.0.0.1` (what every
    /// loopback test server and the local NATS use).
    pub fn loopback_server(common_name: &'a str) -> Leaf<'a> {
        Leaf {
            common_name,
            alternative_names: &["127.0.0.1"],
            server: true,
            ..Leaf::default()
        }
    }
}

/// A certificate and its private key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct CertifiedKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
}

impl Ca {
    /// A new CA with a fresh ECDSA P-256 key.
    pub fn new(common_name: &str) -> Result<Ca, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = name(common_name, &[]);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// An existing CA: its certificate and private key, PEM. The key may be PKCS#8
    /// (`PRIVATE KEY`: ECDSA, Ed25519 or RSA) or PKCS#1 (`RSA PRIVATE KEY`, what BOSH
    /// generates); it must be the certificate's key. Errors never quote the key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let key = if key_pem
            .trim_start()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----")
        {
            RsaKey::from_pem(key_pem)?.key_pair()?
        } else {
            KeyPair::from_pem(key_pem).map_err(|_| {
                PkiError::Parse(
                    "private key: expected a PEM 'PRIVATE KEY' (PKCS#8) or 'RSA PRIVATE KEY' block"
                        .into(),
                )
            })?
        };
        let der = pem_certificate_der(cert_pem)?;
        let cert = webpki::EndEntityCert::try_from(&der)
            .map_err(|e| PkiError::Parse(format!("CA certificate: {e}")))?;
        // The subject public key is the SPKI's last element (its BIT STRING contents).
        let spki = cert.subject_public_key_info();
        let raw = key.public_key_raw();
        if raw.is_empty() || !spki.as_ref().ends_with(raw) {
            return Err(PkiError::Parse(
                "the private key does not belong to the CA certificate".into(),
            ));
        }
        let issuer = Issuer::from_ca_cert_der(&der, key)
            .map_err(|e| PkiError::Parse(format!("CA certificate: {e}")))?;
        Ok(Ca {
            issuer,
            cert_pem: cert_pem.to_string(),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// Issues a leaf certificate signed by this CA.
    pub fn issue(&self, leaf: &Leaf<'_>) -> Result<CertifiedKey, PkiError> {
        let sans: Vec<String> = leaf
            .alternative_names
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name = name(leaf.common_name, leaf.organizations);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        if leaf.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if leaf.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The subject of the first certificate of `cert_pem` the way nats-server names the user a
/// certificate maps to (`tls { verify_and_map: true }`): its attributes as `TYPE=value` in
/// the certificate's order, joined by `", "` (`C=USA, O=Cloud Foundry, CN=x`). Values with
/// characters a DN would have to escape (`,+"\<>;=`) are refused rather than escaped.
pub fn subject_dn(cert_pem: &str) -> Result<String, PkiError> {
    let der = pem_certificate_der(cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| PkiError::Parse(format!("certificate: {e}")))?;
    let mut parts = Vec::new();
    for rdn in cert.subject().iter() {
        for attr in rdn.iter() {
            let oid = attr.attr_type();
            let name = short_attribute_name(&oid.to_id_string()).ok_or_else(|| {
                PkiError::Parse(format!("certificate subject: unsupported attribute {oid}"))
            })?;
            let value = attr
                .as_str()
                .map_err(|_| PkiError::Parse(format!("certificate subject: {name} is not text")))?;
            if value.chars().any(|c| ",+\"\\<>;=".contains(c)) {
                return Err(PkiError::Parse(format!(
                    "certificate subject: {name} has a character that would need escaping"
                )));
            }
            parts.push(format!("{name}={value}"));
        }
    }
    Ok(parts.join(", "))
}

/// Short names of the subject attributes certificates of BOSH identities use, by OID.
fn short_attribute_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        _ => return None,
    })
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
fn pem_certificate_der(pem: &str) -> Result<rustls::pki_types::CertificateDer<'static>, PkiError> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| PkiError::Parse("CA certificate: no PEM 'CERTIFICATE' block".into()))
}

/// A fresh ECDSA P-256 key pair: (private PKCS#8 PEM, public PEM).
pub fn key_pair_pem() -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    dn
}

/// An RSA private key, as BOSH generates them (config-server: `rsa.GenerateKey`, exponent
/// 65537). `Debug` never prints the key.
#[derive(Clone)]
pub struct RsaKey(rsa::RsaPrivateKey);

impl std::fmt::Debug for RsaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RsaKey({} bits, <redacted>)", self.bits())
    }
}

impl RsaKey {
    /// A fresh key of `bits` bits from the operating system's random source.
    pub fn generate(bits: usize) -> Result<RsaKey, PkiError> {
        // AWS-LC makes the sizes it supports about three times as fast as the `rsa` crate
        // (Go's speed, which bosh-cli has); the key is handed over as PKCS#8 DER.
        use aws_lc_rs::encoding::AsDer as _;
        use aws_lc_rs::rsa::KeySize;
        use rsa::pkcs8::DecodePrivateKey as _;
        let size = match bits {
            2048 => Some(KeySize::Rsa2048),
            3072 => Some(KeySize::Rsa3072),
            4096 => Some(KeySize::Rsa4096),
            _ => None,
        };
        if let Some(size) = size {
            let failed = |what: &str| PkiError::Rsa(format!("{bits}-bit key {what} failed"));
            let pair = aws_lc_rs::rsa::KeyPair::generate(size).map_err(|_| failed("generation"))?;
            let der = pair.as_der().map_err(|_| failed("encoding"))?;
            return rsa::RsaPrivateKey::from_pkcs8_der(der.as_ref())
                .map(RsaKey)
                .map_err(|e| PkiError::Rsa(e.to_string()));
        }
        let mut rng = rsa::rand_core::OsRng;
        rsa::RsaPrivateKey::new(&mut rng, bits)
            .map(RsaKey)
            .map_err(|e| PkiError::Rsa(e.to_string()))
    }

    /// Reads a PEM private key: PKCS#1 (`RSA PRIVATE KEY`, what BOSH writes) or PKCS#8
    /// (`PRIVATE KEY`). Errors do not quote the text.
    pub fn from_pem(pem: &str) -> Result<RsaKey, PkiError> {
        let pem = pem.trim();
        let key = if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
            rsa::RsaPrivateKey::from_pkcs1_pem(pem).map_err(|e| e.to_string())
        } else if pem.starts_with("-----BEGIN PRIVATE KEY-----") {
            rsa::RsaPrivateKey::from_pkcs8_pem(pem).map_err(|e| e.to_string())
        } else {
            Err("expected a PEM 'RSA PRIVATE KEY' or 'PRIVATE KEY' block".to_string())
        };
        key.map(RsaKey)
            .map_err(|e| PkiError::Parse(format!("private key: {e}")))
    }

    /// The key size in bits.
    pub fn bits(&self) -> usize {
        self.0.size() * 8
    }

    /// The private key as PKCS#1 PEM (`-----BEGIN RSA PRIVATE KEY-----`), as Go's
    /// `x509.MarshalPKCS1PrivateKey` + `pem.EncodeToMemory` write it (64-column lines, final
    /// newline).
    pub fn private_pkcs1_pem(&self) -> Result<String, PkiError> {
        self.0
            .to_pkcs1_pem(LineEnding::LF)
            .map(|pem| pem.as_str().to_string())
            .map_err(|e| PkiError::Rsa(e.to_string()))
    }

    /// The public key as PKIX PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn public_pem(&self) -> Result<String, PkiError> {
        self.0
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| PkiError::Rsa(e.to_string()))
    }

    /// The public key in the SSH wire format (RFC 4253 `ssh-rsa` blob).
    pub fn ssh_public_blob(&self) -> Vec<u8> {
        fn string(out: &mut Vec<u8>, bytes: &[u8]) {
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        fn mpint(out: &mut Vec<u8>, magnitude: &[u8]) {
            // Positive: no leading zeros, but a zero byte when the top bit is set.
            let trimmed = match magnitude.iter().position(|b| *b != 0) {
                Some(i) => &magnitude[i..],
                None => &[],
            };
            if trimmed.first().is_some_and(|b| b & 0x80 != 0) {
                let mut padded = Vec::with_capacity(trimmed.len() + 1);
                padded.push(0);
                padded.extend_from_slice(trimmed);
                string(out, &padded);
            } else {
                string(out, trimmed);
            }
        }
        let mut blob = Vec::new();
        string(&mut blob, b"ssh-rsa");
        mpint(&mut blob, &self.0.e().to_bytes_be());
        mpint(&mut blob, &self.0.n().to_bytes_be());
        blob
    }

    /// The public key as an `authorized_keys` line: `ssh-rsa AAAA...` and a newline, no
    /// comment (Go's `ssh.MarshalAuthorizedKey`).
    pub fn ssh_authorized_key(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.ssh_public_blob());
        format!("ssh-rsa {b64}\n")
    }

    /// The MD5 fingerprint of the SSH public key, as lower-case hex pairs joined by `:`
    /// (what `ssh-keygen -l -E md5` prints after `MD5:`).
    pub fn ssh_fingerprint_md5(&self) -> String {
        use md5::Digest as _;
        let digest = md5::Md5::digest(self.ssh_public_blob());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// SHA-1 of the modulus' big-endian bytes: the subject key identifier config-server
    /// writes.
    pub fn modulus_sha1(&self) -> Vec<u8> {
        use sha1::Digest as _;
        sha1::Sha1::digest(self.0.n().to_bytes_be()).to_vec()
    }

    /// The key as an rcgen signing key (RSA PKCS#1 v1.5 with SHA-256, as Go signs with RSA).
    pub fn key_pair(&self) -> Result<KeyPair, PkiError> {
        let der = self
            .0
            .to_pkcs8_der()
            .map_err(|e| PkiError::Rsa(e.to_string()))?;
        Ok(KeyPair::try_from(der.as_bytes())?)
    }
}

/// Signs `params` for `key`: self-signed when `issuer` is `None`, otherwise by the CA whose
/// certificate (PEM) and key are given. The authority key identifier is the issuer's subject
/// key identifier. Returns the certificate, PEM.
pub fn sign_with_rsa(
    params: CertificateParams,
    key: &RsaKey,
    issuer: Option<(&str, &RsaKey)>,
) -> Result<String, PkiError> {
    let subject_key = key.key_pair()?;
    let cert = match issuer {
        None => params.self_signed(&subject_key)?,
        Some((ca_pem, ca_key)) => {
            let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key.key_pair()?)
                .map_err(|e| PkiError::Parse(format!("CA certificate: {e}")))?;
            params.signed_by(&subject_key, &issuer)?
        }
    };
    Ok(cert.pem())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_reads_as_nats_server_names_its_user() {
        let ca = Ca::new("ca").unwrap();
        let leaf = |cn, orgs| {
            let c = ca
                .issue(&Leaf {
                    common_name: cn,
                    organizations: orgs,
                    client: true,
                    ..Leaf::default()
                })
                .unwrap();
            subject_dn(&c.cert_pem)
        };
        assert_eq!(
            leaf("a.agent.bosh-internal", &[]).unwrap(),
            "CN=a.agent.bosh-internal"
        );
        let both = leaf("d", &["Cloud Foundry"]).unwrap();
        assert!(
            both.contains("CN=d") && both.contains("O=Cloud Foundry"),
            "{both}"
        );
        assert!(leaf("a,b", &[]).is_err());
        assert!(subject_dn("not a certificate").is_err());
    }
    use rustls::pki_types::UnixTime;

    /// True if `leaf_pem` chains to `ca_pem` as a client certificate.
    fn signed_by(leaf_pem: &str, ca_pem: &str) -> bool {
        let ca = pem_certificate_der(ca_pem).unwrap();
        let leaf = pem_certificate_der(leaf_pem).unwrap();
        let anchor = webpki::anchor_from_trusted_cert(&ca).unwrap();
        let ee = webpki::EndEntityCert::try_from(&leaf).unwrap();
        let algs = rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .all;
        ee.verify_for_usage(
            algs,
            &[anchor],
            &[],
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .is_ok()
    }

    fn client<'a>(cn: &'a str) -> Leaf<'a> {
        Leaf {
            common_name: cn,
            client: true,
            ..Leaf::default()
        }
    }

    #[test]
    fn a_ca_read_from_pem_signs_leaves_that_chain_to_it() {
        let original = Ca::new("nats-ca").unwrap();
        let key_pem = original.issuer.key().serialize_pem();
        let loaded = Ca::from_pem(&original.cert_pem(), &key_pem).unwrap();
        assert_eq!(loaded.cert_pem(), original.cert_pem());
        let leaf = loaded.issue(&client("a1.agent.bosh-internal")).unwrap();
        assert!(signed_by(&leaf.cert_pem, &original.cert_pem()));
        let other = Ca::new("other").unwrap();
        assert!(!signed_by(&leaf.cert_pem, &other.cert_pem()));
    }

    /// Every size: the bits asked for, BOSH's exponent, and a key that round-trips through
    /// the PKCS#1 PEM BOSH writes (AWS-LC's sizes and the `rsa` crate's for the others).
    #[test]
    fn keys_of_every_size_are_boshs() {
        for bits in [1024, 2048, 3072, 4096] {
            let key = RsaKey::generate(bits).unwrap();
            assert_eq!(key.bits(), bits);
            assert_eq!(key.0.e(), &rsa::BigUint::from(65_537u32));
            let again = RsaKey::from_pem(&key.private_pkcs1_pem().unwrap()).unwrap();
            assert_eq!(again.modulus_sha1(), key.modulus_sha1());
        }
    }

    #[test]
    fn a_bosh_style_rsa_ca_reads_from_pkcs1() {
        let key = RsaKey::generate(2048).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = name("bosh-ca", &[]);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert_pem = sign_with_rsa(params, &key, None).unwrap();
        let ca = Ca::from_pem(&cert_pem, &key.private_pkcs1_pem().unwrap()).unwrap();
        let leaf = ca.issue(&client("a2.agent.bosh-internal")).unwrap();
        assert!(signed_by(&leaf.cert_pem, &cert_pem));
    }

    #[test]
    fn a_key_of_another_certificate_or_garbage_is_refused_without_quoting_it() {
        let a = Ca::new("a").unwrap();
        let b = Ca::new("b").unwrap();
        let b_key = b.issuer.key().serialize_pem();
        let e = Ca::from_pem(&a.cert_pem(), &b_key).unwrap_err().to_string();
        assert!(e.contains("does not belong"), "{e}");
        assert!(!e.contains("PRIVATE KEY-----"), "{e}");
        let e = Ca::from_pem(&a.cert_pem(), "not a key")
            .unwrap_err()
            .to_string();
        assert!(e.contains("private key"), "{e}");
        let a_key = a.issuer.key().serialize_pem();
        let e = Ca::from_pem("garbage", &a_key).unwrap_err().to_string();
        assert!(e.contains("CA certificate"), "{e}");
        assert!(!e.contains(a_key.lines().nth(1).unwrap()), "{e}");
    }
}
