//! MX formats.
