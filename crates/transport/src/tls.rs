//! TLS for the agent transports: PEM loading, rustls client configurations, and the
//! bosh-agent's extra server check (certificate CN must match `*.nats.bosh-internal`); and
//! a server that only a client of a CA (and of some names) may reach: the controller's ops
//! API, reached only by kube-apiserver's front proxy.

use std::sync::{Arc, LazyLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

/// A TLS setting could not be built. Never contains key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The CA PEM holds no usable certificate.
    #[error("no CA certificate in the CA PEM")]
    NoCa,
    /// A CA certificate was rejected.
    #[error("invalid CA certificate: {0}")]
    BadCa(String),
    /// The client certificate PEM holds no certificate.
    #[error("no certificate in the client certificate PEM")]
    NoCert,
    /// The private key PEM could not be read (its content is not shown).
    #[error("cannot read the client private key")]
    BadKey,
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
    /// The server certificate PEM holds no certificate.
    #[error("no certificate in the server certificate PEM")]
    NoServerCert,
    /// The server private key PEM could not be read (its content is not shown).
    #[error("cannot read the server private key")]
    BadServerKey,
}

/// The message bosh-agent fails the handshake with (`mbus/nats_handler.go`).
pub const CN_MISMATCH: &str = "server Certificate CommonName does not match *.nats.bosh-internal";

/// bosh-agent's check, verbatim: `^[a-zA-Z0-9*\-]*.nats.bosh-internal$` (its dots are
/// unescaped, so they match any character).
static BOSH_NATS_CN: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[a-zA-Z0-9*\-]*.nats.bosh-internal$").expect("constant regex")
});

/// True if `cn` passes bosh-agent's server CN check (e.g. `default.nats.bosh-internal`).
pub fn is_bosh_nats_server_cn(cn: &str) -> bool {
    BOSH_NATS_CN.is_match(cn)
}

/// The ring provider (the crate builds rustls with ring only).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Trust anchors from a PEM bundle.
pub fn root_store(ca_pem: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| TlsError::BadCa(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| TlsError::BadCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCa);
    }
    Ok(roots)
}

/// A client certificate chain and key from PEM.
pub fn client_identity(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::NoCert)?;
    if certs.is_empty() {
        return Err(TlsError::NoCert);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| TlsError::BadKey)?;
    Ok((certs, key))
}

/// A client configuration that trusts only `ca_pem`, checks the server name, presents
/// `identity` if given and, with `bosh_nats_cn`, also requires the server certificate's
/// CN to match `*.nats.bosh-internal` as bosh-agent does. TLS 1.2 and 1.3.
pub fn client_config(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
    bosh_nats_cn: bool,
) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let roots = Arc::new(root_store(ca_pem)?);
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if bosh_nats_cn {
        Arc::new(BoshNatsVerifier { inner: webpki })
    } else {
        webpki
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        Some((cert_pem, key_pem)) => {
            let (certs, key) = client_identity(cert_pem, key_pem)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|_| TlsError::BadKey)
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A client configuration that trusts no server: for an HTTP client that talks plain HTTP
/// only (reqwest still wants a TLS configuration, having no crypto provider of its own here).
pub fn client_config_trusting_nothing() -> Result<ClientConfig, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth())
}

/// A server configuration presenting the certificate chain `cert_pem` (leaf first) with
/// `key_pem`, without client authentication, TLS 1.2 and 1.3, offering only the ALPN
/// protocols in `alpn` (bosh-agent's HTTPS mbus offers `http/1.1`). A key that does not
/// belong to the certificate is refused.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let (certs, key) = server_identity(cert_pem, key_pem)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        // rustls's errors here name the problem (key mismatch, unsupported key type), never
        // the key itself.
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// [`server_config`] that requires a client certificate issued by `client_ca_pem` and,
/// when `allowed_names` is not empty, with one of them as its common name (kube-apiserver's
/// `--requestheader-client-ca-file` and `--requestheader-allowed-names`, which an
/// extension API server checks the front proxy against).
pub fn server_config_for_clients_of(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
    allowed_names: Vec<String>,
) -> Result<ServerConfig, TlsError> {
    let (certs, key) = server_identity(cert_pem, key_pem)?;
    let roots = Arc::new(root_store(client_ca_pem)?);
    let inner = WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let verifier = Arc::new(NamedClientVerifier {
        inner,
        allowed_names,
    });
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A server's certificate chain and key from PEM (their content never in an error).
fn server_identity(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::NoServerCert)?;
    if certs.is_empty() {
        return Err(TlsError::NoServerCert);
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| TlsError::BadServerKey)?;
    Ok((certs, key))
}

/// WebPKI client verification followed by a check of the client's common name.
#[derive(Debug)]
struct NamedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    allowed_names: Vec<String>,
}

impl ClientCertVerifier for NamedClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = (self.inner).verify_client_cert(end_entity, intermediates, now)?;
        let cn = common_name(end_entity).unwrap_or_default();
        if self.allowed_names.is_empty() || self.allowed_names.contains(&cn) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Standard WebPKI verification (chain to the CA, validity, server name) followed by
/// bosh-agent's CN check, as Go's `VerifyPeerCertificate` runs after the normal checks.
#[derive(Debug)]
struct BoshNatsVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

/// The CN error; its `Debug` is the message too, as rustls prints it with `{:?}`.
struct CnMismatch;

impl std::fmt::Debug for CnMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(CN_MISMATCH)
    }
}

impl std::fmt::Display for CnMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(CN_MISMATCH)
    }
}

impl std::error::Error for CnMismatch {}

impl ServerCertVerifier for BoshNatsVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let cn = common_name(end_entity).unwrap_or_default();
        if is_bosh_nats_server_cn(&cn) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(CnMismatch))),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The subject common name of a DER certificate: the last CN attribute, as Go's
/// `pkix.Name.CommonName`. `None` if the certificate cannot be parsed or has no CN.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    subject_common_name(ee.subject())
}

/// The last CN in an X.501 `Name` given as its DER contents (the RDN sequence without the
/// outer SEQUENCE header).
pub fn subject_common_name(mut rdns: &[u8]) -> Option<String> {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let mut found = None;
    while !rdns.is_empty() {
        let (tag, mut set, rest) = der_tlv(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, rest) = der_tlv(set)?;
            set = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = der_tlv(atv)?;
            if tag != OID {
                return None;
            }
            if oid == CN {
                let (tag, text, _) = der_tlv(value)?;
                found = Some(decode_directory_string(tag, text)?);
            }
        }
    }
    found
}

/// One DER TLV: (tag, contents, rest). Only single-byte tags; lengths up to 4 bytes.
fn der_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || input.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &input[..n] {
            len = (len << 8) | usize::from(b);
        }
        input = &input[n..];
        len
    };
    if input.len() < len {
        return None;
    }
    Some((tag, &input[..len], &input[len..]))
}

fn decode_directory_string(tag: u8, bytes: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, TeletexString (treated as Latin-1 by most), IA5String
        0x0c | 0x13 | 0x16 => String::from_utf8(bytes.to_vec()).ok(),
        0x14 => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16BE
        0x1e => {
            if !bytes.len().is_multiple_of(2) {
                return None;
            }
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        // UniversalString: UTF-32BE
        0x1c => {
            if !bytes.len().is_multiple_of(4) {
                return None;
            }
            bytes
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cn_check_is_bosh_agents_regex() {
        assert!(is_bosh_nats_server_cn("default.nats.bosh-internal"));
        assert!(is_bosh_nats_server_cn("*.nats.bosh-internal"));
        assert!(is_bosh_nats_server_cn("a-b-1.nats.bosh-internal"));
        // The unescaped dots of the upstream regex match any character.
        assert!(is_bosh_nats_server_cn("xnatsXbosh-internal"));
        assert!(!is_bosh_nats_server_cn("nats.bosh-internal"));
        assert!(!is_bosh_nats_server_cn("a.b.nats.bosh-internal"));
        assert!(!is_bosh_nats_server_cn("default.nats.bosh-internal.evil"));
        assert!(!is_bosh_nats_server_cn("director.bosh-internal"));
        assert!(!is_bosh_nats_server_cn(""));
    }

    #[test]
    fn common_name_of_generated_certificates() {
        let ca = kubosh_base::pki::Ca::new("ca").unwrap();
        let leaf = ca
            .issue(&kubosh_base::pki::Leaf {
                common_name: "default.nats.bosh-internal",
                organizations: &["Cloud Foundry"],
                alternative_names: &["127.0.0.1"],
                server: true,
                ..Default::default()
            })
            .unwrap();
        let der = CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            common_name(&der).as_deref(),
            Some("default.nats.bosh-internal")
        );
    }

    #[test]
    fn bmp_and_long_lengths() {
        // SET { SEQ { OID 2.5.4.3, BMPString "ab" } }
        let name = [
            0x31, 0x0d, 0x30, 0x0b, 0x06, 0x03, 0x55, 0x04, 0x03, 0x1e, 0x04, 0x00, b'a', 0x00,
            b'b',
        ];
        assert_eq!(subject_common_name(&name).as_deref(), Some("ab"));
        // Long-form length.
        let name = [
            0x31, 0x81, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x01, b'x',
        ];
        assert_eq!(subject_common_name(&name).as_deref(), Some("x"));
        assert_eq!(subject_common_name(&[0x31, 0x05, 0x30]), None);
    }

    proptest! {
        #[test]
        fn name_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = subject_common_name(&bytes);
            let _ = common_name(&CertificateDer::from(bytes));
        }
    }

    #[test]
    fn bad_pem_is_an_error_without_key_material() {
        assert_eq!(root_store("nope").unwrap_err(), TlsError::NoCa);
        let ca = kubosh_base::pki::Ca::new("ca").unwrap();
        let err = client_config(&ca.cert_pem(), Some(("", "SECRET-KEY")), true).unwrap_err();
        assert!(!err.to_string().contains("SECRET"));
    }

    #[test]
    fn server_config_checks_its_inputs() {
        let ca = kubosh_base::pki::Ca::new("ca").unwrap();
        let leaf = ca
            .issue(&kubosh_base::pki::Leaf::loopback_server("agent"))
            .unwrap();
        let config = server_config(&leaf.cert_pem, &leaf.key_pem, &[b"http/1.1"]).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(
            server_config("", &leaf.key_pem, &[]).unwrap_err(),
            TlsError::NoServerCert
        );
        let err = server_config(&leaf.cert_pem, "SECRET-KEY", &[]).unwrap_err();
        assert_eq!(err, TlsError::BadServerKey);
        // A key of another certificate.
        let (other_key, _) = kubosh_base::pki::key_pair_pem().unwrap();
        let err = server_config(&leaf.cert_pem, &other_key, &[]).unwrap_err();
        assert!(matches!(err, TlsError::Config(_)), "{err:?}");
    }
}
