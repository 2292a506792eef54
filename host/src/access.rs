//! The one access check for tables.
//!
//! Internal tables: every authenticated caller (their row filter is the guard). Other
//! tables: administrators, or a `table` grant on one of the caller's groups. There is no
//! public flag and no wildcard. Checks read the store on every request — before any cache —
//! so a revoked grant takes effect at once.

use std::collections::HashSet;

use crate::api::{ApiError, ApiResult};
use crate::auth::Caller;
use crate::state::AppState;
use crate::store::registry::{QueryMode, RegistryRow};

/// The registered table the caller asked for: 404 when it is not registered, 403 when the
/// caller may not read it. Runs before any cache is consulted.
pub async fn readable_table(
    state: &AppState,
    caller: &Caller,
    table_id: &str,
) -> ApiResult<RegistryRow> {
    let (row, granted) = state
        .store
        .table_with_grant(table_id, &caller.user.id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Table '{table_id}' is not registered")))?;
    if row.query_mode == QueryMode::Internal || caller.is_admin || granted {
        Ok(row)
    } else {
        Err(ApiError::forbidden(format!(
            "Access denied to table '{table_id}'"
        )))
    }
}

/// Whether a registry row is listed for a caller whose readable ids are `readable` (the
/// answer of [`readable_ids`]): internal tables always, others when readable.
pub fn is_visible(row: &RegistryRow, readable: Option<&HashSet<String>>) -> bool {
    row.query_mode == QueryMode::Internal || readable.is_none_or(|ids| ids.contains(&row.id))
}

/// The non-internal tables the caller may read; None means all (administrators).
pub async fn readable_ids(state: &AppState, caller: &Caller) -> ApiResult<Option<HashSet<String>>> {
    if caller.is_admin {
        return Ok(None);
    }
    Ok(Some(
        state
            .store
            .granted_table_ids(&caller.user.id)
            .await?
            .into_iter()
            .collect(),
    ))
}
