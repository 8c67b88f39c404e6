//! Tests of loading, validating and printing the configuration.
