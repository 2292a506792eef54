//! The rules every registered table id obeys.

/// Pattern every table id must match.
pub const TABLE_ID_PATTERN: &str = r"^[A-Za-z0-9_.\-]{1,128}$";

/// What [`is_valid_table_id`] asks, for messages.
pub const TABLE_ID_RULE: &str =
    "1–128 letters, digits, '_', '.' or '-', and not only dots (ids name files and URL paths)";

/// Whether a string is a valid table id (the API validates with [`TABLE_ID_PATTERN`] too).
/// Ids made only of dots match the pattern but are refused: `.` and `..` cannot travel in a
/// URL path or name a file, so no client could read or delete such a table.
pub fn is_valid_table_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !id.bytes().all(|b| b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_valid_table_id("orders.v2-final_x"));
        assert!(is_valid_table_id(".hidden") && is_valid_table_id("a..b"));
        for bad in ["", ".", "..", "...", "a/b", "../x", "a b", &"x".repeat(129)] {
            assert!(!is_valid_table_id(bad), "{bad}");
        }
    }
}
