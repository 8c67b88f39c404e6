//! Humane units for the config file: sizes (`64KiB`, `1MiB`) and durations (`500ms`, `24h`);
//! and ages as the admin endpoints write them (`3.042`, in seconds).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// A size in bytes, written in config as `1024`, `64KiB`, `1MiB`, `1GiB`, `10kB`, `1MB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(u64);

impl ByteSize {
    /// `n` bytes.
    pub const fn bytes(n: u64) -> Self {
        Self(n)
    }

    /// `n` KiB.
    pub const fn kib(n: u64) -> Self {
        Self(n * 1024)
    }

    /// `n` MiB.
    pub const fn mib(n: u64) -> Self {
        Self(n * 1024 * 1024)
    }

    /// The size in bytes.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// As a `usize`, saturating on targets where the size does not fit.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

const UNITS: &[(&str, u64)] = &[
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("kB", 1_000),
    ("KB", 1_000),
    ("B", 1),
];

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
        let (digits, unit) = (&raw[..split], raw[split..].trim());
        let bad = || {
            format!("invalid size {raw:?}: expected a whole number with an optional unit (B, KiB, MiB, GiB, kB, MB, GB)")
        };
        let count: u64 = digits.parse().map_err(|_| bad())?;
        let multiplier = match unit {
            "" => 1,
            unit => UNITS
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|(_, m)| *m)
                .ok_or_else(bad)?,
        };
        count
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(|| format!("size {raw:?} is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = UNITS[..3]
            .iter()
            .find(|(_, m)| self.0 >= *m && self.0 % m == 0);
        match unit {
            Some((name, m)) => write!(f, "{}{name}", self.0 / m),
            None => write!(f, "{}B", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)
            .map_err(|_| serde::de::Error::custom("expected a size such as \"1MiB\""))?
        {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl serde::Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Serde helpers for `Duration` fields written as `500ms`, `30s`, `24h`.
pub mod humane_duration {
    use super::*;

    /// A text that is not a duration.
    #[derive(Debug, Clone, PartialEq, thiserror::Error)]
    #[error("invalid duration {raw:?}: expected e.g. \"500ms\", \"30s\", \"24h\"")]
    pub struct DurationError {
        raw: String,
        #[source]
        source: humantime::DurationError,
    }

    /// A duration as an operator writes one, or why it is not one.
    pub fn parse(raw: &str) -> Result<Duration, DurationError> {
        humantime::parse_duration(raw.trim()).map_err(|source| DurationError {
            raw: raw.to_owned(),
            source,
        })
    }

    /// Reads a humane duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let raw = String::deserialize(deserializer)
            .map_err(|_| serde::de::Error::custom("expected a duration such as \"30s\""))?;
        parse(&raw).map_err(serde::de::Error::custom)
    }

    /// Writes a humane duration.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!("1MiB".parse::<ByteSize>().unwrap(), ByteSize::mib(1));
        assert_eq!("64KiB".parse::<ByteSize>().unwrap(), ByteSize::kib(64));
        assert_eq!("10kB".parse::<ByteSize>().unwrap(), ByteSize::bytes(10_000));
        assert_eq!("512".parse::<ByteSize>().unwrap(), ByteSize::bytes(512));
        assert_eq!(ByteSize::mib(1).to_string(), "1MiB");
        assert_eq!(ByteSize::bytes(1500).to_string(), "1500B");
    }

    #[test]
    fn bad_sizes_are_refused() {
        for raw in [
            "",
            "MiB",
            "1.5MiB",
            "-1",
            "1 parsec",
            "99999999999999999999GiB",
        ] {
            assert!(raw.parse::<ByteSize>().is_err(), "{raw}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(
            humane_duration::parse("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            humane_duration::parse("24h").unwrap(),
            Duration::from_secs(86_400)
        );
        assert!(humane_duration::parse("5 parsecs").is_err());
        assert!(humane_duration::parse("").is_err());
    }
}
