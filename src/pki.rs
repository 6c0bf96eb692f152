//! A small certificate authority: the CA and leaf certificates kubosh needs for its own test
//! and development environments (apiserver serving certs, NATS mutual TLS), and the RSA keys
//! and RSA-signed certificates BOSH variables are made of ([`RsaKey`], [`sign_with_rsa`]).
//!
//! RSA keys are generated with the `rsa` crate: rcgen's `ring` backend can sign with RSA keys
//! but cannot generate them, so the key is handed to rcgen as PKCS#8.

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
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

/// A self-signed certificate authority that signs leaf certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
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
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Ca { issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
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
