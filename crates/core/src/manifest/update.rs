//! The `update` block: canaries, `max_in_flight`, watch times, serial, VM strategy.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An `update` block, at deployment level or as an instance group override.
///
/// At deployment level `canaries`, `max_in_flight`, `canary_watch_time` and
/// `update_watch_time` are required (checked by validation); an instance group's block falls
/// back key by key to the deployment's ([`Update::overlaid_on`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Update {
    /// How many instances are updated first, alone: a count or a percentage like `"20%"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canaries: Option<Quantity>,
    /// How many instances are updated at once: a count or a percentage like `"25%"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Quantity>,
    /// Milliseconds to wait for a canary to be running: `"30000"` or `"5000-60000"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_watch_time: Option<WatchTime>,
    /// Milliseconds to wait for an instance to be running: `"30000"` or `"5000-60000"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_watch_time: Option<WatchTime>,
    /// Update instance groups one after another (`true`, the default) or together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<bool>,
    /// `delete-create` (default) or `create-swap-delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_strategy: Option<VmStrategy>,
    /// `serial` (default) or `parallel`: on the very first deploy, update all AZs together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_deploy_az_update_strategy: Option<AzUpdateStrategy>,
}

impl Update {
    /// This block with every missing key taken from `base` (BOSH's key-by-key fallback).
    pub fn overlaid_on(&self, base: &Update) -> Update {
        Update {
            canaries: self.canaries.or(base.canaries),
            max_in_flight: self.max_in_flight.or(base.max_in_flight),
            canary_watch_time: self.canary_watch_time.or(base.canary_watch_time),
            update_watch_time: self.update_watch_time.or(base.update_watch_time),
            serial: self.serial.or(base.serial),
            vm_strategy: self.vm_strategy.or(base.vm_strategy),
            initial_deploy_az_update_strategy: self
                .initial_deploy_az_update_strategy
                .or(base.initial_deploy_az_update_strategy),
        }
    }
}

/// How a VM is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum VmStrategy {
    /// Delete the old VM, then create the new one.
    DeleteCreate,
    /// Create the new VM first, switch to it, then delete the old one.
    CreateSwapDelete,
}

/// How AZs are updated on the very first deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AzUpdateStrategy {
    /// One AZ after another.
    Serial,
    /// All AZs together.
    Parallel,
}

/// A count of instances, absolute (`2`) or relative (`"25%"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// An absolute number of instances.
    Count(u64),
    /// An integer percentage of the instances concerned.
    Percent(u64),
}

/// Why a text is not a [`Quantity`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a whole number or an integer percentage like \"25%\", found {0:?}")]
pub struct QuantityError(pub String);

impl Quantity {
    /// Parses `"3"` or `"25%"`.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let t = text.trim();
        let (digits, percent) = match t.strip_suffix('%') {
            Some(d) => (d.trim(), true),
            None => (t, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(QuantityError(text.to_string()));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| QuantityError(text.to_string()))?;
        Ok(if percent {
            Quantity::Percent(n)
        } else {
            Quantity::Count(n)
        })
    }

    /// Canaries among `size` instances: a percentage rounds down, and never more than `size`.
    pub fn canaries(self, size: usize) -> usize {
        self.of(size).min(size)
    }

    /// Instances in flight among `size`: like [`Quantity::canaries`] but at least 1.
    pub fn max_in_flight(self, size: usize) -> usize {
        self.of(size).min(size).max(1)
    }

    fn of(self, size: usize) -> usize {
        match self {
            Quantity::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Quantity::Percent(p) => {
                let scaled = (size as u128) * u128::from(p) / 100;
                usize::try_from(scaled).unwrap_or(usize::MAX)
            }
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quantity::Count(n) => write!(f, "{n}"),
            Quantity::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Quantity::Count(n) => s.serialize_u64(*n),
            Quantity::Percent(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text =
            scalar_text(serde_json::Value::deserialize(d)?).map_err(serde::de::Error::custom)?;
        Quantity::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A whole number of instances or an integer percentage like \"25%\".",
            "x-kubernetes-int-or-string": true,
            "x-kubosh-format": "quantity",
        })
    }
}

/// A watch time in milliseconds: one number, or a `min-max` range polled in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchTime {
    /// First check after this many milliseconds.
    pub min_ms: u64,
    /// Give up after this many milliseconds.
    pub max_ms: u64,
}

/// Why a text is not a [`WatchTime`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchTimeError {
    /// Not `N` or `N-M` with whole milliseconds.
    #[error("expected milliseconds like \"30000\" or a range like \"5000-60000\", found {0:?}")]
    Format(String),
    /// `min-max` with min greater than max.
    #[error("watch time range {0:?} starts after it ends (min must not exceed max)")]
    MinAboveMax(String),
}

impl WatchTime {
    /// Parses `"30000"` or `"5000-60000"` (spaces around `-` allowed).
    pub fn parse(text: &str) -> Result<WatchTime, WatchTimeError> {
        let number = |s: &str| -> Result<u64, WatchTimeError> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(WatchTimeError::Format(text.to_string()));
            }
            s.parse()
                .map_err(|_| WatchTimeError::Format(text.to_string()))
        };
        match text.split_once('-') {
            Some((a, b)) => {
                let (min_ms, max_ms) = (number(a)?, number(b)?);
                if min_ms > max_ms {
                    return Err(WatchTimeError::MinAboveMax(text.to_string()));
                }
                Ok(WatchTime { min_ms, max_ms })
            }
            None => {
                let n = number(text)?;
                Ok(WatchTime {
                    min_ms: n,
                    max_ms: n,
                })
            }
        }
    }
}

impl fmt::Display for WatchTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min_ms == self.max_ms {
            write!(f, "{}", self.min_ms)
        } else {
            write!(f, "{}-{}", self.min_ms, self.max_ms)
        }
    }
}

impl Serialize for WatchTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.min_ms == self.max_ms {
            s.serialize_u64(self.min_ms)
        } else {
            s.serialize_str(&self.to_string())
        }
    }
}

impl<'de> Deserialize<'de> for WatchTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text =
            scalar_text(serde_json::Value::deserialize(d)?).map_err(serde::de::Error::custom)?;
        WatchTime::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for WatchTime {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WatchTime".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Milliseconds, \"30000\", or a range \"5000-60000\".",
            "x-kubernetes-int-or-string": true,
            "x-kubosh-format": "watch-time",
        })
    }
}

/// The text of a YAML scalar that may be written as a number or a string.
fn scalar_text(v: serde_json::Value) -> Result<String, String> {
    match v {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("expected a number or a string, found {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_follow_bosh_rounding() {
        assert_eq!(Quantity::parse("25%").unwrap().max_in_flight(10), 2);
        assert_eq!(Quantity::parse("5%").unwrap().max_in_flight(10), 1);
        assert_eq!(Quantity::parse("5%").unwrap().canaries(10), 0);
        assert_eq!(Quantity::parse("200%").unwrap().canaries(3), 3);
        assert_eq!(Quantity::parse("7").unwrap().max_in_flight(3), 3);
        assert!(Quantity::parse("2.5%").is_err());
        assert!(Quantity::parse("-1").is_err());
        assert!(Quantity::parse("%").is_err());
    }

    #[test]
    fn watch_times_parse_single_and_range() {
        assert_eq!(
            WatchTime::parse("5000-60000").unwrap(),
            WatchTime {
                min_ms: 5000,
                max_ms: 60000
            }
        );
        assert_eq!(
            WatchTime::parse("30000").unwrap(),
            WatchTime {
                min_ms: 30000,
                max_ms: 30000
            }
        );
        assert_eq!(
            WatchTime::parse("60000-5000"),
            Err(WatchTimeError::MinAboveMax("60000-5000".into()))
        );
        assert!(matches!(
            WatchTime::parse("5s"),
            Err(WatchTimeError::Format(_))
        ));
    }

    #[test]
    fn group_update_falls_back_key_by_key() {
        let base = Update {
            canaries: Some(Quantity::Count(1)),
            max_in_flight: Some(Quantity::Percent(25)),
            serial: Some(false),
            ..Update::default()
        };
        let group = Update {
            max_in_flight: Some(Quantity::Count(3)),
            ..Update::default()
        };
        let merged = group.overlaid_on(&base);
        assert_eq!(merged.canaries, Some(Quantity::Count(1)));
        assert_eq!(merged.max_in_flight, Some(Quantity::Count(3)));
        assert_eq!(merged.serial, Some(false));
    }
}
