//! CPI errors: the `Bosh::Clouds::*` types the director understands (`bosh-protocols.md` §1.4)
//! and the ways a call can fail before the CPI gets to answer.

use std::path::PathBuf;
use std::time::Duration;

/// The error `type` of a CPI response, as the director classifies it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `Bosh::Clouds::CpiError`.
    CpiError,
    /// `Bosh::Clouds::NotSupported`.
    NotSupported,
    /// `Bosh::Clouds::NotImplemented`, also what the director makes of the Go and Ruby CPI
    /// libraries' unknown-method errors (`InvalidCall` "Method is not known, got ..." and
    /// `CloudError` "Invalid Method: ...").
    NotImplemented,
    /// `Bosh::Clouds::CloudError`, the generic IaaS failure.
    CloudError,
    /// `Bosh::Clouds::VMNotFound` (tolerated by `delete_vm` callers).
    VmNotFound,
    /// `Bosh::Clouds::NetworkNotFound`.
    NetworkNotFound,
    /// `Bosh::Clouds::NoDiskSpace` (retriable kind).
    NoDiskSpace,
    /// `Bosh::Clouds::DiskNotAttached` (retriable kind; tolerated by `detach_disk` callers).
    DiskNotAttached,
    /// `Bosh::Clouds::DiskNotFound` (retriable kind).
    DiskNotFound,
    /// `Bosh::Clouds::VMCreationFailed` (retriable kind; the director retries `create_vm` on it
    /// when `ok_to_retry` is set).
    VmCreationFailed,
    /// Any other type, kept verbatim (the director reports these as "Unknown CPI error").
    Unknown(String),
}

impl ErrorKind {
    /// A refusal rather than a fault: the CPI will answer the same request the same way
    /// (it does not support or implement it, finds the request malformed, or the network it
    /// names does not exist), so retrying without a change is pointless.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ErrorKind::CpiError
                | ErrorKind::NotSupported
                | ErrorKind::NotImplemented
                | ErrorKind::NetworkNotFound
        )
    }

    /// Every known kind, for tests and listings.
    pub const KNOWN: [ErrorKind; 10] = [
        ErrorKind::CpiError,
        ErrorKind::NotSupported,
        ErrorKind::NotImplemented,
        ErrorKind::CloudError,
        ErrorKind::VmNotFound,
        ErrorKind::NetworkNotFound,
        ErrorKind::NoDiskSpace,
        ErrorKind::DiskNotAttached,
        ErrorKind::DiskNotFound,
        ErrorKind::VmCreationFailed,
    ];

    /// The wire name, e.g. `Bosh::Clouds::VMNotFound`.
    pub fn type_name(&self) -> &str {
        match self {
            ErrorKind::CpiError => "Bosh::Clouds::CpiError",
            ErrorKind::NotSupported => "Bosh::Clouds::NotSupported",
            ErrorKind::NotImplemented => "Bosh::Clouds::NotImplemented",
            ErrorKind::CloudError => "Bosh::Clouds::CloudError",
            ErrorKind::VmNotFound => "Bosh::Clouds::VMNotFound",
            ErrorKind::NetworkNotFound => "Bosh::Clouds::NetworkNotFound",
            ErrorKind::NoDiskSpace => "Bosh::Clouds::NoDiskSpace",
            ErrorKind::DiskNotAttached => "Bosh::Clouds::DiskNotAttached",
            ErrorKind::DiskNotFound => "Bosh::Clouds::DiskNotFound",
            ErrorKind::VmCreationFailed => "Bosh::Clouds::VMCreationFailed",
            ErrorKind::Unknown(name) => name,
        }
    }

    /// Parses a wire name; unknown names are kept verbatim.
    pub fn from_type_name(name: &str) -> ErrorKind {
        Self::KNOWN
            .iter()
            .find(|k| k.type_name() == name)
            .cloned()
            .unwrap_or_else(|| ErrorKind::Unknown(name.to_string()))
    }

    /// Classifies a CPI error as the director does, including its compatibility mapping of
    /// the CPI libraries' unknown-method errors to `NotImplemented`.
    pub fn classify(error_type: &str, message: &str) -> ErrorKind {
        if (error_type == "InvalidCall" && message.starts_with("Method is not known, got"))
            || (error_type == "Bosh::Clouds::CloudError" && message.starts_with("Invalid Method:"))
        {
            return ErrorKind::NotImplemented;
        }
        Self::from_type_name(error_type)
    }

    /// True for the four kinds the director builds from `ok_to_retry`
    /// (`RetriableCloudError`: NoDiskSpace, DiskNotAttached, DiskNotFound, VMCreationFailed).
    pub fn is_retriable_kind(&self) -> bool {
        matches!(
            self,
            ErrorKind::NoDiskSpace
                | ErrorKind::DiskNotAttached
                | ErrorKind::DiskNotFound
                | ErrorKind::VmCreationFailed
        )
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.type_name())
    }
}

/// A failed CPI call.
#[derive(Debug, thiserror::Error)]
pub enum CpiError {
    /// The CPI answered with an error object. The message is the director's.
    #[error(
        "CPI error '{error_type}' with message '{message}' in '{method}' CPI method (CPI request ID: '{request_id}')"
    )]
    Cloud {
        /// The classified type.
        kind: ErrorKind,
        /// The type exactly as the CPI sent it.
        error_type: String,
        /// The CPI's message.
        message: String,
        /// Whether the CPI says the call may be repeated.
        ok_to_retry: bool,
        /// The CPI method.
        method: String,
        /// The request's `context.request_id`.
        request_id: String,
    },
    /// Stdout was not a JSON response of the expected shape.
    #[error(
        "Invalid CPI response in '{method}' CPI method (CPI request ID: '{request_id}'): {reason}; stdout: '{excerpt}'"
    )]
    InvalidResponse {
        /// The CPI method.
        method: String,
        /// The request's `context.request_id`.
        request_id: String,
        /// What is wrong.
        reason: String,
        /// The start of stdout (secrets removed).
        excerpt: String,
    },
    /// The response was well-formed but its `result` has the wrong shape for the method.
    #[error(
        "Unexpected result of '{method}' CPI method (CPI request ID: '{request_id}'): expected {expected}, got '{excerpt}'"
    )]
    UnexpectedResult {
        /// The CPI method.
        method: String,
        /// The request's `context.request_id`.
        request_id: String,
        /// The shape the method's contract requires.
        expected: &'static str,
        /// The result received (secrets removed, shortened).
        excerpt: String,
    },
    /// The CPI did not answer in time and was killed.
    #[error("CPI '{method}' timed out after {} s (CPI request ID: '{request_id}')", timeout.as_secs())]
    Timeout {
        /// The CPI method.
        method: String,
        /// The request's `context.request_id`.
        request_id: String,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// The CPI executable could not be started.
    #[error("Failed to run cpi: '{}': {source}", path.display())]
    Spawn {
        /// The executable.
        path: PathBuf,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// Talking to the CPI process failed.
    #[error("I/O error talking to the CPI in '{method}' CPI method: {source}")]
    Io {
        /// The CPI method.
        method: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `attach_disk` returned no disk hint (the director's `AttachDiskResponseError`).
    #[error(
        "No disk_hint (attach_disk of disk '{disk_cid}' to VM '{vm_cid}', CPI request ID: '{request_id}')"
    )]
    NoDiskHint {
        /// The VM.
        vm_cid: String,
        /// The disk.
        disk_cid: String,
        /// The request's `context.request_id`.
        request_id: String,
    },
    /// `info` did not report a usable `api_version`, or the version is outside what kubosh
    /// supports (the director raises `NotSupported` for these).
    #[error("{0}")]
    ApiVersion(String),
}

/// Why a cloud pushed back on a call it refused: it is called too often, or it has no room
/// for what was asked. Either way it made nothing, and the same call may succeed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// The IaaS API's rate limit (AWS `RequestLimitExceeded`/`Throttling`, GCP
    /// `rateLimitExceeded`, Azure and HTTP `TooManyRequests`/429).
    RateLimited,
    /// No capacity for the VM (AWS `InsufficientInstanceCapacity`, GCP
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, Azure `AllocationFailed`).
    NoCapacity,
}

/// How IaaS APIs (and the CPIs that pass their errors on) say they are called too often:
/// matched, case-insensitively, in the error's type and message.
const RATE_LIMITED: [&str; 9] = [
    "requestlimitexceeded",
    "throttl",
    "rate exceeded",
    "ratelimitexceeded",
    "rate limit",
    "toomanyrequests",
    "too many requests",
    "slowdown",
    "status code: 429",
];

/// How they say there is no room for the VM.
const NO_CAPACITY: [&str; 5] = [
    "insufficientinstancecapacity",
    "insufficient capacity",
    "zone_resource_pool_exhausted",
    "allocationfailed",
    "capacity not available",
];

impl CpiError {
    /// Whether the CPI's answer is a [`Pushback`] (rate limit or capacity) rather than a
    /// failure of the request itself. Only answers the CPI gave count: a timeout or a
    /// garbled answer may have made something.
    pub fn pushback(&self) -> Option<Pushback> {
        let CpiError::Cloud {
            error_type,
            message,
            ..
        } = self
        else {
            return None;
        };
        let text = format!("{error_type} {message}").to_ascii_lowercase();
        let says = |markers: &[&str]| markers.iter().any(|m| text.contains(m));
        if says(&RATE_LIMITED) {
            Some(Pushback::RateLimited)
        } else if says(&NO_CAPACITY) {
            Some(Pushback::NoCapacity)
        } else {
            None
        }
    }

    /// The error kind when the CPI answered with an error.
    pub fn kind(&self) -> Option<&ErrorKind> {
        match self {
            CpiError::Cloud { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// True when the CPI answered with this kind of error.
    pub fn is(&self, kind: &ErrorKind) -> bool {
        self.kind() == Some(kind)
    }

    /// The CPI's `ok_to_retry` (false for failures that are not CPI answers).
    pub fn ok_to_retry(&self) -> bool {
        matches!(
            self,
            CpiError::Cloud {
                ok_to_retry: true,
                ..
            }
        )
    }

    /// `NotImplemented` or `NotSupported`: the signal to fall back (e.g. `resize_disk` ⇒
    /// create a new disk and copy).
    pub fn is_not_implemented(&self) -> bool {
        matches!(
            self.kind(),
            Some(ErrorKind::NotImplemented | ErrorKind::NotSupported)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushback_is_read_from_the_iaas_words_in_type_or_message() {
        let answer = |error_type: &str, message: &str| CpiError::Cloud {
            kind: ErrorKind::classify(error_type, message),
            error_type: error_type.into(),
            message: message.into(),
            ok_to_retry: false,
            method: "create_vm".into(),
            request_id: "cpi-100000".into(),
        };
        let cases = [
            (
                "Bosh::Clouds::CloudError",
                "Request limit exceeded. (RequestLimitExceeded)",
                Some(Pushback::RateLimited),
            ),
            (
                "Bosh::Clouds::CloudError",
                "Throttling: Rate exceeded",
                Some(Pushback::RateLimited),
            ),
            (
                "Bosh::Clouds::CloudError",
                "googleapi: Error 403: Rate Limit Exceeded, rateLimitExceeded",
                Some(Pushback::RateLimited),
            ),
            (
                "Bosh::Clouds::CloudError",
                "compute.VirtualMachinesClient: StatusCode=429 Code=\"TooManyRequests\"",
                Some(Pushback::RateLimited),
            ),
            (
                "Bosh::Clouds::VMCreationFailed",
                "InsufficientInstanceCapacity: We currently do not have sufficient m5.large capacity",
                Some(Pushback::NoCapacity),
            ),
            (
                "Bosh::Clouds::VMCreationFailed",
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                Some(Pushback::NoCapacity),
            ),
            (
                "Bosh::Clouds::CloudError",
                "Subnet 'subnet-1' has no free address",
                None,
            ),
            ("Bosh::Clouds::CpiError", "Invalid 'instance_type'", None),
        ];
        for (error_type, message, expected) in cases {
            assert_eq!(
                answer(error_type, message).pushback(),
                expected,
                "{message}"
            );
        }
        let timeout = CpiError::Timeout {
            method: "create_vm".into(),
            request_id: "cpi-100001".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(
            timeout.pushback(),
            None,
            "no answer: it may have made the VM"
        );
    }

    #[test]
    fn kinds_round_trip_and_unknown_types_are_kept() {
        for kind in ErrorKind::KNOWN {
            assert_eq!(ErrorKind::from_type_name(kind.type_name()), kind);
        }
        assert_eq!(
            ErrorKind::from_type_name("Custom::Boom"),
            ErrorKind::Unknown("Custom::Boom".into())
        );
        assert_eq!(ErrorKind::Unknown("X".into()).type_name(), "X");
    }

    #[test]
    fn library_unknown_method_errors_mean_not_implemented() {
        assert_eq!(
            ErrorKind::classify("InvalidCall", "Method is not known, got 'x'"),
            ErrorKind::NotImplemented
        );
        assert_eq!(
            ErrorKind::classify("Bosh::Clouds::CloudError", "Invalid Method: x"),
            ErrorKind::NotImplemented
        );
        assert_eq!(
            ErrorKind::classify("Bosh::Clouds::CloudError", "boom"),
            ErrorKind::CloudError
        );
        assert_eq!(
            ErrorKind::classify("InvalidCall", "other"),
            ErrorKind::Unknown("InvalidCall".into())
        );
    }

    #[test]
    fn timeout_message_is_clear() {
        let e = CpiError::Timeout {
            method: "create_vm".into(),
            request_id: "cpi-1".into(),
            timeout: Duration::from_secs(600),
        };
        assert!(
            e.to_string()
                .starts_with("CPI 'create_vm' timed out after 600 s"),
            "{e}"
        );
    }
}
