//! A small certificate authority: the CA and leaf certificates kubosh needs for its own test
//! and development environments (apiserver serving certs, NATS mutual TLS).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A failure to generate a key or certificate.
#[derive(Debug, thiserror::Error)]
#[error("cannot generate certificate: {0}")]
pub struct PkiError(#[from] rcgen::Error);

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
