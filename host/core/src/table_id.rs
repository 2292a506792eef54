//! The rules every registered table id obeys.

/// Pattern every table id must match.
pub const TABLE_ID_PATTERN: &str = r"^[A-Za-z0-9_.\-]{1,128}$";

/// Whether a string is a valid table id (the API validates with [`TABLE_ID_PATTERN`] too).
pub fn is_valid_table_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
