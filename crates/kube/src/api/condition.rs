//! Status conditions shared by all kinds: the kstatus trio `Ready`, `Reconciling`, `Stalled`.
//!
//! Every condition kubosh writes carries the `observedGeneration` it was computed for, and the
//! status carries one too, in the same write: `kubectl wait --for=condition=Ready` and kstatus
//! (Flux, kpt) compare both with `metadata.generation`.

/// The resource is in the state its spec asks for (kstatus: Current when `True`).
pub const READY: &str = "Ready";

/// kubosh is working towards the spec, e.g. a deploy task is running (kstatus: InProgress when
/// `True`).
pub const RECONCILING: &str = "Reconciling";

/// kubosh stopped trying until the spec changes: a bad manifest, a failed canary, a CPI quota
/// error (kstatus: Failed when `True`).
pub const STALLED: &str = "Stalled";
