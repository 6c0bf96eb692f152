//! The value generators of the BOSH CLI's vars store (cloudfoundry/config-server
//! `types/*_generator.go`, which bosh-cli vendors): the same types, options, defaults and
//! value shapes.
//!
//! | type          | options                                         | value                                              |
//! |---------------|-------------------------------------------------|----------------------------------------------------|
//! | `password`    | `length` (20)                                   | string of `a-z0-9`                                 |
//! | `certificate` | see [`CertificateOptions`]                      | `{ca, certificate, private_key}` (PEM)             |
//! | `rsa`         | none (ignored)                                  | `{private_key, public_key}` (PKCS#1, PKIX PEM)     |
//! | `ssh`         | none (ignored)                                  | `{private_key, public_key, public_key_fingerprint}`|
//!
//! Generated values are returned as [`SecretValue`]s so they cannot be printed by accident.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Map, Value, json};

use super::SecretValue;
use super::keys::KeyMaker;
use kubosh_base::pki::{PkiError, RsaKey, sign_with_rsa};

/// Password length when `length` is absent or 0.
pub const DEFAULT_PASSWORD_LENGTH: usize = 20;
/// The characters of generated passwords.
pub const PASSWORD_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
/// Key size of `rsa` and `ssh` variables.
pub const RSA_KEY_BITS: usize = 2048;
/// Key size of certificates when `key_length` is absent (config-server's `DefaultKeyLength`).
pub const DEFAULT_CERTIFICATE_KEY_BITS: usize = 3072;
/// The `key_length`s a certificate may ask for.
pub const CERTIFICATE_KEY_BITS: [usize; 3] = [2048, 3072, 4096];
/// Certificate validity when `duration` is absent or not positive, in days.
pub const DEFAULT_CERTIFICATE_DAYS: i64 = 365;
/// The subject organization when `organization` is absent.
pub const DEFAULT_ORGANIZATION: &str = "Cloud Foundry";
/// Longest password kubosh generates (a guard against absurd `length`s).
const MAX_PASSWORD_LENGTH: usize = 4096;

/// A variable type kubosh can generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `password`
    Password,
    /// `certificate`
    Certificate,
    /// `rsa`
    Rsa,
    /// `ssh`
    Ssh,
}

impl Kind {
    /// The kind for a `type:` value, if kubosh can generate it.
    pub fn parse(kind: &str) -> Option<Kind> {
        match kind {
            "password" => Some(Kind::Password),
            "certificate" => Some(Kind::Certificate),
            "rsa" => Some(Kind::Rsa),
            "ssh" => Some(Kind::Ssh),
            _ => None,
        }
    }
}

/// Why a value could not be generated. Texts follow config-server's where it has them and
/// never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A `type:` kubosh cannot generate.
    #[error("Unsupported value type: {0}")]
    UnsupportedType(String),
    /// An option that is unknown, of the wrong type or out of range.
    #[error("Failed to generate {kind}, parameters are invalid: {message}")]
    Options {
        /// `password`, `certificate`, ...
        kind: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A leaf certificate without `ca`.
    #[error("Missing required CA name")]
    MissingCaName,
    /// The CA's value is not a certificate with a private key.
    #[error("Loading certificates: {0}")]
    BadCa(String),
    /// Key or certificate generation failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
}

fn options_error(kind: &'static str, message: impl Into<String>) -> GenerateError {
    GenerateError::Options {
        kind,
        message: message.into(),
    }
}

/// The options of a definition as a map; `null`/absent is empty. Unknown keys are rejected
/// when `supported` is given (config-server's `objToStruct`).
fn option_map(
    options: Option<&Value>,
    kind: &'static str,
    supported: &[&str],
) -> Result<Map<String, Value>, GenerateError> {
    let map = match options {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(options_error(kind, "expected options to be a map")),
    };
    if let Some(key) = map.keys().find(|k| !supported.contains(&k.as_str())) {
        return Err(options_error(
            kind,
            format!("Unsupported parameter '{key}'"),
        ));
    }
    Ok(map)
}

fn int_option(
    map: &Map<String, Value>,
    key: &str,
    kind: &'static str,
) -> Result<Option<i64>, GenerateError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
        Some(_) => Err(options_error(kind, format!("'{key}' must be an integer"))),
    }
}

fn string_option(
    map: &Map<String, Value>,
    key: &str,
    kind: &'static str,
) -> Result<Option<String>, GenerateError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(options_error(kind, format!("'{key}' must be a string"))),
    }
}

fn string_list_option(
    map: &Map<String, Value>,
    key: &str,
    kind: &'static str,
) -> Result<Vec<String>, GenerateError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(options_error(
                    kind,
                    format!("'{key}' must be a list of strings"),
                )),
            })
            .collect(),
        Some(_) => Err(options_error(
            kind,
            format!("'{key}' must be a list of strings"),
        )),
    }
}

/// Generates a value of `kind`, its RSA key (if it has one) from `keys`. A certificate with
/// a `ca` needs that CA's material.
pub fn generate(
    kind: Kind,
    options: Option<&Value>,
    ca: Option<&CaMaterial>,
    keys: &KeyMaker,
) -> Result<SecretValue, GenerateError> {
    match kind {
        Kind::Password => password(options),
        Kind::Rsa => rsa_key(keys),
        Kind::Ssh => ssh_key(keys),
        Kind::Certificate => certificate(&CertificateOptions::parse(options)?, ca, keys),
    }
}

/// The size of the RSA key a definition of `kind` with `options` will ask for, if any
/// (options that do not parse ask for none: their generation fails before a key).
pub fn key_bits(kind: Kind, options: Option<&Value>) -> Option<usize> {
    match kind {
        Kind::Password => None,
        Kind::Rsa | Kind::Ssh => Some(RSA_KEY_BITS),
        Kind::Certificate => CertificateOptions::parse(options).ok().map(|o| o.key_bits),
    }
}

/// A `password`: `length` (default 20) characters from `a-z0-9`, uniformly chosen from the
/// operating system's random source.
pub fn password(options: Option<&Value>) -> Result<SecretValue, GenerateError> {
    let map = option_map(options, "password", &["length"])?;
    let length = match int_option(&map, "length", "password")? {
        None | Some(0) => DEFAULT_PASSWORD_LENGTH,
        Some(n) if n < 0 => {
            return Err(options_error(
                "password",
                "'length' param cannot be negative",
            ));
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    if length > MAX_PASSWORD_LENGTH {
        return Err(options_error(
            "password",
            format!("'length' must be at most {MAX_PASSWORD_LENGTH}"),
        ));
    }
    let rng = SystemRandom::new();
    let alphabet = PASSWORD_ALPHABET.len();
    // Rejection sampling: bytes at or above the largest multiple of the alphabet size are
    // dropped so every character is equally likely.
    let limit = 256 - 256 % alphabet;
    let mut out = String::with_capacity(length);
    let mut buf = [0u8; 64];
    while out.len() < length {
        rng.fill(&mut buf)
            .map_err(|_| PkiError::Rsa("the system random source failed".into()))?;
        for b in buf {
            if (b as usize) < limit && out.len() < length {
                out.push(PASSWORD_ALPHABET[b as usize % alphabet] as char);
            }
        }
    }
    Ok(SecretValue::new(Value::String(out)))
}

/// An `rsa` variable: a 2048-bit key, `{private_key, public_key}` (PKCS#1 and PKIX PEM).
pub fn rsa_key(keys: &KeyMaker) -> Result<SecretValue, GenerateError> {
    let key = keys.key(RSA_KEY_BITS)?;
    Ok(SecretValue::new(json!({
        "private_key": key.private_pkcs1_pem()?,
        "public_key": key.public_pem()?,
    })))
}

/// An `ssh` variable: a 2048-bit RSA key, `{private_key, public_key,
/// public_key_fingerprint}`: PKCS#1 PEM, an `authorized_keys` line (`ssh-rsa AAAA...\n`) and
/// the MD5 fingerprint (`aa:bb:...`).
pub fn ssh_key(keys: &KeyMaker) -> Result<SecretValue, GenerateError> {
    let key = keys.key(RSA_KEY_BITS)?;
    Ok(SecretValue::new(json!({
        "private_key": key.private_pkcs1_pem()?,
        "public_key": key.ssh_authorized_key(),
        "public_key_fingerprint": key.ssh_fingerprint_md5(),
    })))
}

/// An extended key usage a certificate may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendedKeyUsage {
    /// `server_auth`
    ServerAuth,
    /// `client_auth`
    ClientAuth,
}

/// A `certificate` definition's options (config-server `certParams`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateOptions {
    /// `common_name`: the subject CN.
    pub common_name: String,
    /// `organization`: the subject O (default `Cloud Foundry`).
    pub organization: String,
    /// `alternative_names`: DNS names, and IP addresses (which become IP SANs). Leaf only.
    pub alternative_names: Vec<String>,
    /// `is_ca`: a CA certificate (self-signed unless `ca` is given).
    pub is_ca: bool,
    /// `ca`: the variable whose certificate signs this one.
    pub ca: Option<String>,
    /// `extended_key_usage` (default `server_auth`). Leaf only.
    pub extended_key_usage: Vec<ExtendedKeyUsage>,
    /// `duration`: validity in days (default 365).
    pub duration_days: i64,
    /// `key_length`: RSA key size (2048, 3072 or 4096; default 3072).
    pub key_bits: usize,
}

impl CertificateOptions {
    /// The option names config-server accepts for certificates.
    pub const SUPPORTED: [&'static str; 8] = [
        "common_name",
        "organization",
        "alternative_names",
        "is_ca",
        "ca",
        "extended_key_usage",
        "duration",
        "key_length",
    ];

    /// Reads and checks a definition's options.
    pub fn parse(options: Option<&Value>) -> Result<CertificateOptions, GenerateError> {
        const K: &str = "certificate";
        let map = option_map(options, K, &Self::SUPPORTED)?;
        let is_ca = match map.get("is_ca") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(options_error(K, "'is_ca' must be a boolean")),
        };
        let key_bits = match int_option(&map, "key_length", K)? {
            None | Some(0) => DEFAULT_CERTIFICATE_KEY_BITS,
            Some(n) => {
                let ok = usize::try_from(n)
                    .ok()
                    .filter(|n| CERTIFICATE_KEY_BITS.contains(n));
                ok.ok_or_else(|| {
                    options_error(
                        K,
                        format!("Invalid key_length: {n}.  Must be one of: [2048 3072 4096]"),
                    )
                })?
            }
        };
        let extended_key_usage = string_list_option(&map, "extended_key_usage", K)?
            .iter()
            .map(|usage| match usage.as_str() {
                "server_auth" => Ok(ExtendedKeyUsage::ServerAuth),
                "client_auth" => Ok(ExtendedKeyUsage::ClientAuth),
                other => Err(options_error(
                    K,
                    format!("Unsupported extended key usage value: {other}"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let duration_days = match int_option(&map, "duration", K)? {
            Some(d) if d > 0 => d,
            _ => DEFAULT_CERTIFICATE_DAYS,
        };
        if duration_days > 365 * 1000 {
            return Err(options_error(K, "'duration' is too long"));
        }
        Ok(CertificateOptions {
            common_name: string_option(&map, "common_name", K)?.unwrap_or_default(),
            organization: string_option(&map, "organization", K)?
                .filter(|o| !o.is_empty())
                .unwrap_or_else(|| DEFAULT_ORGANIZATION.to_string()),
            alternative_names: string_list_option(&map, "alternative_names", K)?,
            is_ca,
            ca: string_option(&map, "ca", K)?.filter(|c| !c.is_empty()),
            extended_key_usage,
            duration_days,
            key_bits,
        })
    }
}

/// A signing CA: its certificate and private key, read from a certificate variable's value.
#[derive(Debug, Clone)]
pub struct CaMaterial {
    /// The CA certificate, PEM (public).
    pub certificate: String,
    key: RsaKey,
}

impl CaMaterial {
    /// Reads `{certificate, private_key}` (the value of a `certificate` variable). Errors name
    /// the variable, never the value.
    pub fn from_value(name: &str, value: &Value) -> Result<CaMaterial, GenerateError> {
        let field = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| {
                    GenerateError::BadCa(format!(
                        "Expected variable '{name}' to be a certificate with '{key}'"
                    ))
                })
        };
        let certificate = field("certificate")?.to_string();
        if !certificate
            .trim_start()
            .starts_with("-----BEGIN CERTIFICATE-----")
        {
            return Err(GenerateError::BadCa(format!(
                "Certificate of variable '{name}' did not contain PEM formatted block"
            )));
        }
        let key = RsaKey::from_pem(field("private_key")?)
            .map_err(|e| GenerateError::BadCa(format!("Variable '{name}': {e}")))?;
        Ok(CaMaterial { certificate, key })
    }
}

/// A `certificate`: a fresh RSA key and a certificate for it, shaped as config-server makes
/// them. Subject `C=US, O=<organization>, CN=<common_name>`; serial a random 128-bit number;
/// valid from now for `duration` days; subject key identifier SHA-1 of the modulus, authority
/// key identifier the signer's; SHA-256 with RSA.
///
/// - CA (`is_ca`): basic constraints CA, key usage certificate and CRL signing; self-signed
///   (`ca` is the certificate itself) or, with `ca`, signed by it (`ca` is the signer's
///   certificate).
/// - Leaf: needs `ca`; basic constraints not-CA, key usage digital signature and key
///   encipherment, the extended key usages (`server_auth` by default), SANs from
///   `alternative_names`.
pub fn certificate(
    options: &CertificateOptions,
    ca: Option<&CaMaterial>,
    keys: &KeyMaker,
) -> Result<SecretValue, GenerateError> {
    if !options.is_ca && options.ca.is_none() {
        return Err(GenerateError::MissingCaName);
    }
    let signer = match (&options.ca, ca) {
        (Some(name), None) => {
            return Err(GenerateError::BadCa(format!(
                "Expected to find variable '{name}' with a certificate"
            )));
        }
        (Some(_), Some(ca)) => Some(ca),
        (None, _) => None,
    };

    let key = keys.key(options.key_bits)?;
    let mut params = CertificateParams::default();
    params.serial_number = Some(random_serial()?);
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = now + time::Duration::days(options.duration_days);
    params.distinguished_name = subject(&options.organization, &options.common_name);
    params.key_identifier_method = KeyIdMethod::PreSpecified(key.modulus_sha1());
    params.use_authority_key_identifier_extension = true;
    if options.is_ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    } else {
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let usages = if options.extended_key_usage.is_empty() {
            vec![ExtendedKeyUsage::ServerAuth]
        } else {
            options.extended_key_usage.clone()
        };
        params.extended_key_usages = usages
            .iter()
            .map(|u| match u {
                ExtendedKeyUsage::ServerAuth => ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsage::ClientAuth => ExtendedKeyUsagePurpose::ClientAuth,
            })
            .collect();
        let sans: Vec<SanType> = (options.alternative_names.iter())
            .map(|name| match name.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => name.clone().try_into().map(SanType::DnsName).map_err(|_| {
                    options_error(
                        "certificate",
                        format!("alternative name '{name}' is not ASCII"),
                    )
                }),
            })
            .collect::<Result<_, _>>()?;
        // As bosh-cli (Go's x509 writes a template's DNS names before its IP addresses):
        // the DNS names in their order, then the addresses in theirs.
        let (dns, ips): (Vec<SanType>, Vec<SanType>) = sans
            .into_iter()
            .partition(|san| matches!(san, SanType::DnsName(_)));
        params.subject_alt_names = dns.into_iter().chain(ips).collect();
    }

    let cert = sign_with_rsa(
        params,
        &key,
        signer.map(|ca| (ca.certificate.as_str(), &ca.key)),
    )?;
    let ca_pem = signer.map_or_else(|| cert.clone(), |ca| ca.certificate.clone());
    Ok(SecretValue::new(json!({
        "ca": ca_pem,
        "certificate": cert,
        "private_key": key.private_pkcs1_pem()?,
    })))
}

fn random_serial() -> Result<SerialNumber, GenerateError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::Rsa("the system random source failed".into()))?;
    Ok(SerialNumber::from_slice(&bytes))
}

/// `C=US, O=<organization>, CN=<common_name>`, printable strings where possible (as Go).
fn subject(organization: &str, common_name: &str) -> DistinguishedName {
    let value = |s: &str| match rcgen::string::PrintableString::try_from(s) {
        Ok(p) => DnValue::PrintableString(p),
        Err(_) => DnValue::Utf8String(s.to_string()),
    };
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CountryName, value("US"));
    dn.push(DnType::OrganizationName, value(organization));
    dn.push(DnType::CommonName, value(common_name));
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_default_to_20_lowercase_and_digits() {
        let p = password(None).unwrap();
        let s = p.expose().as_str().unwrap();
        assert_eq!(s.len(), 20);
        assert!(s.bytes().all(|b| PASSWORD_ALPHABET.contains(&b)));
        let p = password(Some(&json!({"length": 7}))).unwrap();
        assert_eq!(p.expose().as_str().unwrap().len(), 7);
        assert!(password(Some(&json!({"length": -1}))).is_err());
        let err = password(Some(&json!({"size": 3}))).unwrap_err().to_string();
        assert_eq!(
            err,
            "Failed to generate password, parameters are invalid: Unsupported parameter 'size'"
        );
    }

    #[test]
    fn certificate_options_follow_config_server() {
        let o = CertificateOptions::parse(Some(&json!({"common_name": "x", "ca": "c"}))).unwrap();
        assert_eq!(o.key_bits, 3072);
        assert_eq!(o.duration_days, 365);
        assert_eq!(o.organization, "Cloud Foundry");
        let err = CertificateOptions::parse(Some(&json!({"key_length": 1024})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Invalid key_length: 1024"), "{err}");
        let err = CertificateOptions::parse(Some(&json!({"extended_key_usage": ["code_signing"]})))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("Unsupported extended key usage value: code_signing"),
            "{err}"
        );
        let err = CertificateOptions::parse(Some(&json!({"key_usage": ["x"]})))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("Unsupported parameter 'key_usage'"), "{err}");
        assert!(matches!(
            certificate(
                &CertificateOptions::parse(None).unwrap(),
                None,
                &KeyMaker::inline()
            ),
            Err(GenerateError::MissingCaName)
        ));
    }
}
