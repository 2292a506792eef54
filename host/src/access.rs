//! The one access check for tables.
//!
//! Internal tables: every authenticated caller (their row filter is the guard). Other
//! tables: administrators, or a `table` grant on one of the caller's groups. There is no
//! public flag and no wildcard. Checks read the store on every request — before any cache —
//! so a revoked grant takes effect at once.

use std::collections::HashSet;

use crate::api::ApiResult;
use crate::auth::Caller;
use crate::state::AppState;
use crate::store::registry::{QueryMode, RegistryRow};

/// Whether the caller may read this table.
pub async fn can_read(state: &AppState, caller: &Caller, table: &RegistryRow) -> ApiResult<bool> {
    if table.query_mode == QueryMode::Internal || caller.is_admin {
        return Ok(true);
    }
    Ok(state
        .store
        .has_grant(&caller.user.id, "table", &table.id)
        .await?)
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
