//! Durations as operators read them beside metrics.

/// A duration written as fractional seconds, to the millisecond (`3.042`): how the admin
/// endpoints and the status page give an age, in the base unit of metrics and precise enough
/// for an alert on half a second.
pub mod fractional_seconds {
    use std::time::Duration;

    use serde::Serializer;

    /// Writes the duration's whole milliseconds as seconds.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Age {
    ///     #[serde(serialize_with = "idempotency_delivery::fractional_seconds::serialize")]
    ///     age: Duration,
    /// }
    /// let age = Age { age: Duration::from_micros(3_042_900) };
    /// assert_eq!(serde_json::to_string(&age).unwrap(), r#"{"age":3.042}"#);
    /// ```
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(duration.as_millis() as f64 / 1000.0)
    }
}
