//! Every action name the server writes, with what a row of it means: the one list behind
//! `GET /api/admin/audit/actions` and the README's table (a test holds the three together).

/// One action name and its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ActionInfo {
    /// The action as stored.
    pub action: &'static str,
    /// One line: what happened when a row of it is written.
    pub meaning: &'static str,
}

const fn a(action: &'static str, meaning: &'static str) -> ActionInfo {
    ActionInfo { action, meaning }
}

/// The catalogue, grouped by area, each group alphabetical.
pub const ACTIONS: &[ActionInfo] = &[
    // Sign-in, users, groups, grants, tokens.
    a(
        "auth.login",
        "a password login, successful or refused (the password is never kept)",
    ),
    a(
        "resource_grant.created",
        "a group was granted access to a resource",
    ),
    a(
        "resource_grant.deleted",
        "a group's grant on a resource was removed",
    ),
    a(
        "token.admin_revoke",
        "an administrator revoked a user's personal access token",
    ),
    a("token.create", "a personal access token was issued"),
    a("token.revoke", "a personal access token was revoked"),
    a("user.activate", "a deactivated user was reactivated"),
    a("user.create", "a user was created"),
    a(
        "user.deactivate",
        "a user was deactivated (their tokens stop working)",
    ),
    a("user.delete", "a user was deleted"),
    a("user.set_password", "a user's password was set or changed"),
    a(
        "user.update",
        "a user's name, e-mail or admin flag changed (params_before holds the old values)",
    ),
    a("user_group.created", "a group was created"),
    a("user_group.deleted", "a group was deleted"),
    a("user_group.member_added", "a user joined a group"),
    a("user_group.member_removed", "a user left a group"),
    a(
        "user_group.updated",
        "a group's name or description changed",
    ),
    // Registry and data.
    a("registry.register", "a table was registered"),
    a("registry.unregister", "a table was unregistered"),
    a(
        "registry.update",
        "a table's registration changed (params_before holds the old one)",
    ),
    a("table.upload", "data was uploaded into a local table"),
    // Discovery, queries, scans, downloads.
    a("catalog.list", "the catalog was listed"),
    a("catalog.sample", "a table's sample rows were read"),
    a("catalog.schema", "a table's schema was read"),
    a("data.download", "a table's data file was downloaded"),
    a(
        "query.hybrid",
        "a query joined local data with a warehouse's",
    ),
    a(
        "query.internal",
        "a query read svc's internal tables (telemetry, audit)",
    ),
    a(
        "query.local",
        "a query ran on the server's engine over local data",
    ),
    a("query.remote", "a query was pushed down to a warehouse"),
    a(
        "scan",
        "rows were scanned out of a table (the client's snapshots and pulls)",
    ),
    a(
        "scan.estimate",
        "a scan's size was estimated before running it",
    ),
    // Sync, scripts, metadata, scheduler.
    a(
        "cache_warmup.run",
        "a warmup of every remote table's metadata was started",
    ),
    a(
        "metadata_cache.refresh",
        "one remote table's metadata was refreshed",
    ),
    a(
        "metadata_cache.refresh_all",
        "a refresh of every remote table's metadata was started",
    ),
    a(
        "scheduler.run",
        "the scheduler ran one job (its outcome in params)",
    ),
    a("script.create", "a script was saved"),
    a("script.delete", "a script was deleted"),
    a("script.run", "a script ran and wrote its target table"),
    a("scripts.run_due", "due scripts were claimed and started"),
    a(
        "sync.table",
        "one materialized table was synced (rows, bytes, duration; error on failure)",
    ),
    a("sync.trigger", "a sync pass was requested"),
    a(
        "ticketing.backfill",
        "a ticketing connection's history was fetched from the tracker (issues, new, pages)",
    ),
    a(
        "ticketing.compact",
        "a ticketing connection's received events were folded into its tables on request",
    ),
    a(
        "ticketing.webhook_rejected",
        "a webhook delivery was refused (signature or body; the body is never kept)",
    ),
    // Sessions and telemetry.
    a(
        "session.browse",
        "an administrator read the session list, KPIs, facets or one user's sessions",
    ),
    a(
        "session.bulk_download",
        "an administrator downloaded many session files as one zip",
    ),
    a("session.download", "a session file was downloaded"),
    a(
        "session.transcript_view",
        "an administrator opened a session transcript",
    ),
    a("session.upload", "an agent session file was uploaded"),
    a(
        "usage.ask",
        "a question about telemetry was turned into SQL and run",
    ),
    a("usage.export", "telemetry events were exported"),
    a(
        "usage.prune",
        "telemetry older than the retention was pruned",
    ),
    a(
        "usage.read",
        "an administrator read telemetry facets, KPIs or events",
    ),
    a(
        "usage.reprocess",
        "session files were reprocessed by the telemetry pipeline",
    ),
    a("usage.run", "the telemetry pipeline was run on request"),
    a("usage.summary", "the telemetry summary was read"),
    // Corporate memory.
    a(
        "corporate_memory.approve",
        "an administrator approved a knowledge item (params_before: the item as it was)",
    ),
    a(
        "corporate_memory.bulk_update",
        "an administrator changed a knowledge item's fields in a bulk update",
    ),
    a(
        "corporate_memory.create",
        "a knowledge item was contributed (pending review)",
    ),
    a(
        "corporate_memory.create_contradiction",
        "an administrator filed a contradiction between two knowledge items",
    ),
    a(
        "corporate_memory.edit",
        "an administrator edited a knowledge item's fields",
    ),
    a(
        "corporate_memory.mandate",
        "an administrator made a knowledge item mandatory, optionally for an audience",
    ),
    a(
        "corporate_memory.personal",
        "a contributor made their knowledge item personal or shared",
    ),
    a(
        "corporate_memory.reject",
        "an administrator rejected a knowledge item",
    ),
    a(
        "corporate_memory.resolve_contradiction",
        "an administrator settled a contradiction (keeping one side retires the other)",
    ),
    a(
        "corporate_memory.resolve_duplicate",
        "an administrator settled a duplicate candidate",
    ),
    a(
        "corporate_memory.revoke",
        "an administrator revoked a mandatory knowledge item",
    ),
    // The plugin marketplace.
    a(
        "marketplace.flea_approve",
        "an administrator approved a submitted skill, agent or plugin (now attributed)",
    ),
    a(
        "marketplace.flea_archive",
        "an administrator archived a submitted entity (its attribution removed)",
    ),
    a(
        "marketplace.flea_submit",
        "a user submitted a skill, agent or plugin for review",
    ),
    a(
        "marketplace.register",
        "an administrator registered a curated marketplace",
    ),
    a(
        "marketplace.sync",
        "a curated marketplace was fetched and its plugins re-read (params: plugins, broken, error)",
    ),
    // Observability reads (once a minute per reader and filter; so are session.browse,
    // session.transcript_view, usage.read and usage.summary).
    a(
        "activity.read",
        "an administrator read the activity timeline, health, sync feed, facets or KPIs",
    ),
    a(
        "admin.user_activity_read",
        "an administrator read one user's activity page",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = ACTIONS.iter().map(|a| a.action).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
    }
}
