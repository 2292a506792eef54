//! The store's tables, declared once and rendered for each backend.
//!
//! Declaring them as data (rather than per-backend DDL text) is what lets a migration step
//! both create a missing table and add the columns an older or hand-made table lacks.

use super::Backend;

/// Column type, limited to what sqlx's `Any` driver carries on both backends.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ty {
    Text,
    Int,
    Bool,
}

/// A column's default value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Default {
    None,
    Int(i64),
    Bool(bool),
    Text(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Column {
    pub name: &'static str,
    pub ty: Ty,
    pub not_null: bool,
    pub default: Default,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Table {
    pub name: &'static str,
    pub columns: &'static [Column],
    pub primary_key: &'static [&'static str],
    pub unique: &'static [&'static [&'static str]],
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Index {
    pub name: &'static str,
    pub table: &'static str,
    pub columns: &'static [&'static str],
}

const fn col(name: &'static str, ty: Ty) -> Column {
    Column {
        name,
        ty,
        not_null: false,
        default: Default::None,
    }
}
const fn req(name: &'static str, ty: Ty) -> Column {
    Column {
        name,
        ty,
        not_null: true,
        default: Default::None,
    }
}
const fn with_default(name: &'static str, ty: Ty, default: Default) -> Column {
    Column {
        name,
        ty,
        not_null: true,
        default,
    }
}

use Ty::{Bool, Int, Text};

impl Column {
    /// The column definition; `adding` relaxes NOT NULL without a default, which neither
    /// backend accepts on a table that already has rows.
    pub fn render(&self, backend: Backend, adding: bool) -> String {
        let ty = match (self.ty, backend) {
            (Text, _) => "TEXT",
            (Int, Backend::Sqlite) => "INTEGER",
            (Int, Backend::Postgres) => "BIGINT",
            (Bool, Backend::Sqlite) => "INTEGER",
            (Bool, Backend::Postgres) => "BOOLEAN",
        };
        let mut out = format!("{} {ty}", self.name);
        let default = match (self.default, backend) {
            (Default::None, _) => None,
            (Default::Int(i), _) => Some(i.to_string()),
            (Default::Bool(b), Backend::Sqlite) => Some(i64::from(b).to_string()),
            (Default::Bool(b), Backend::Postgres) => Some(b.to_string().to_uppercase()),
            (Default::Text(t), _) => Some(format!("'{}'", t.replace('\'', "''"))),
        };
        if self.not_null && (default.is_some() || !adding) {
            out.push_str(" NOT NULL");
        }
        if let Some(d) = default {
            out.push_str(" DEFAULT ");
            out.push_str(&d);
        }
        out
    }
}

impl Table {
    pub fn create_sql(&self, backend: Backend) -> String {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| c.render(backend, false))
            .collect();
        if !self.primary_key.is_empty() {
            parts.push(format!("PRIMARY KEY ({})", self.primary_key.join(", ")));
        }
        for u in self.unique {
            parts.push(format!("UNIQUE ({})", u.join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            self.name,
            parts.join(", ")
        )
    }
}

impl Index {
    pub fn create_sql(&self) -> String {
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} ({})",
            self.name,
            self.table,
            self.columns.join(", ")
        )
    }
}

pub(super) const USERS: Table = Table {
    name: "users",
    columns: &[
        req("id", Text),
        req("email", Text),
        col("name", Text),
        col("password_hash", Text),
        with_default("active", Bool, Default::Bool(true)),
        col("deactivated_at", Text),
        col("deactivated_by", Text),
        col("created_at", Text),
        col("updated_at", Text),
    ],
    primary_key: &["id"],
    unique: &[&["email"]],
};

pub(super) const USER_GROUPS: Table = Table {
    name: "user_groups",
    columns: &[
        req("id", Text),
        req("name", Text),
        col("description", Text),
        with_default("is_system", Bool, Default::Bool(false)),
        col("created_at", Text),
        col("created_by", Text),
    ],
    primary_key: &["id"],
    unique: &[&["name"]],
};

pub(super) const USER_GROUP_MEMBERS: Table = Table {
    name: "user_group_members",
    columns: &[
        req("user_id", Text),
        req("group_id", Text),
        with_default("source", Text, Default::Text("admin")),
        col("added_at", Text),
        col("added_by", Text),
    ],
    primary_key: &["user_id", "group_id"],
    unique: &[],
};

pub(super) const RESOURCE_GRANTS: Table = Table {
    name: "resource_grants",
    columns: &[
        req("id", Text),
        req("group_id", Text),
        req("resource_type", Text),
        req("resource_id", Text),
        col("assigned_at", Text),
        col("assigned_by", Text),
    ],
    primary_key: &["id"],
    unique: &[&["group_id", "resource_type", "resource_id"]],
};

pub(super) const PERSONAL_ACCESS_TOKENS: Table = Table {
    name: "personal_access_tokens",
    columns: &[
        req("id", Text),
        req("user_id", Text),
        req("name", Text),
        req("token_hash", Text),
        req("prefix", Text),
        col("created_at", Text),
        col("expires_at", Text),
        col("last_used_at", Text),
        col("last_used_ip", Text),
        col("revoked_at", Text),
    ],
    primary_key: &["id"],
    unique: &[],
};

pub(super) const TABLE_REGISTRY: Table = Table {
    name: "table_registry",
    columns: &[
        req("id", Text),
        col("name", Text),
        col("source_type", Text),
        col("bucket", Text),
        col("source_table", Text),
        with_default("query_mode", Text, Default::Text("local")),
        col("source_query", Text),
        col("sync_schedule", Text),
        col("description", Text),
        col("registered_by", Text),
        col("registered_at", Text),
        col("updated_at", Text),
        col("primary_key", Text),
        col("cursor_column", Text),
    ],
    primary_key: &["id"],
    unique: &[],
};

/// The audit log as it was before v40; v40 adds the request-context columns.
pub(super) const AUDIT_LOG_BASE: Table = Table {
    name: "audit_log",
    columns: &[
        req("id", Text),
        req("timestamp", Text),
        col("user_id", Text),
        req("action", Text),
        col("resource", Text),
        col("params", Text),
        col("result", Text),
        col("duration_ms", Int),
    ],
    primary_key: &["id"],
    unique: &[],
};

/// Columns v40 adds to `audit_log`.
pub(super) const AUDIT_LOG_V40_COLUMNS: &[Column] = &[
    col("params_before", Text),
    col("client_ip", Text),
    col("client_kind", Text),
    col("correlation_id", Text),
];

pub(super) const AUDIT_LOG_V40_INDICES: &[Index] = &[
    Index {
        name: "idx_audit_timestamp",
        table: "audit_log",
        columns: &["timestamp"],
    },
    Index {
        name: "idx_audit_user_time",
        table: "audit_log",
        columns: &["user_id", "timestamp"],
    },
    Index {
        name: "idx_audit_action_time",
        table: "audit_log",
        columns: &["action", "timestamp"],
    },
];

/// The seven usage tables (v41), filled by the telemetry pipeline.
pub(super) const USAGE_TABLES: &[Table] = &[
    Table {
        name: "usage_events",
        columns: &[
            req("id", Text),
            req("session_id", Text),
            req("session_file", Text),
            req("username", Text),
            col("user_id", Text),
            col("event_uuid", Text),
            col("parent_uuid", Text),
            req("event_type", Text),
            col("tool_name", Text),
            col("skill_name", Text),
            col("subagent_type", Text),
            col("command_name", Text),
            with_default("is_error", Bool, Default::Bool(false)),
            req("source", Text),
            col("ref_id", Text),
            col("model", Text),
            col("cwd", Text),
            req("occurred_at", Text),
            with_default("processor_version", Int, Default::Int(1)),
            col("extracted_at", Text),
        ],
        primary_key: &["id"],
        unique: &[],
    },
    Table {
        name: "usage_session_summary",
        columns: &[
            req("session_file", Text),
            req("session_id", Text),
            req("username", Text),
            col("user_id", Text),
            col("started_at", Text),
            col("ended_at", Text),
            col("active_seconds", Int),
            col("wall_seconds", Int),
            with_default("user_messages", Int, Default::Int(0)),
            with_default("assistant_messages", Int, Default::Int(0)),
            with_default("tool_calls", Int, Default::Int(0)),
            with_default("tool_errors", Int, Default::Int(0)),
            with_default("skill_invocations", Int, Default::Int(0)),
            with_default("subagent_dispatches", Int, Default::Int(0)),
            with_default("mcp_calls", Int, Default::Int(0)),
            with_default("slash_commands", Int, Default::Int(0)),
            with_default("distinct_tools", Int, Default::Int(0)),
            with_default("distinct_skills", Int, Default::Int(0)),
            with_default("input_tokens", Int, Default::Int(0)),
            with_default("output_tokens", Int, Default::Int(0)),
            with_default("cache_read_tokens", Int, Default::Int(0)),
            with_default("cache_creation_tokens", Int, Default::Int(0)),
            col("primary_model", Text),
            with_default("processor_version", Int, Default::Int(1)),
            col("extracted_at", Text),
        ],
        primary_key: &["session_file"],
        unique: &[],
    },
    Table {
        name: "usage_tool_daily",
        columns: &[
            req("day", Text),
            req("tool_name", Text),
            req("source", Text),
            with_default("invocations", Int, Default::Int(0)),
            with_default("error_count", Int, Default::Int(0)),
            with_default("distinct_users", Int, Default::Int(0)),
            with_default("distinct_sessions", Int, Default::Int(0)),
        ],
        primary_key: &["day", "tool_name", "source"],
        unique: &[],
    },
    Table {
        name: "usage_plugin_daily",
        columns: &[
            req("day", Text),
            req("source", Text),
            req("ref_id", Text),
            with_default("invocations", Int, Default::Int(0)),
            with_default("distinct_users", Int, Default::Int(0)),
            with_default("distinct_sessions", Int, Default::Int(0)),
        ],
        primary_key: &["day", "source", "ref_id"],
        unique: &[],
    },
    Table {
        name: "usage_attribution_skills",
        columns: &[
            req("source", Text),
            req("ref_id", Text),
            req("skill_name", Text),
        ],
        primary_key: &["source", "ref_id", "skill_name"],
        unique: &[],
    },
    Table {
        name: "usage_attribution_agents",
        columns: &[
            req("source", Text),
            req("ref_id", Text),
            req("agent_name", Text),
        ],
        primary_key: &["source", "ref_id", "agent_name"],
        unique: &[],
    },
    Table {
        name: "usage_attribution_commands",
        columns: &[
            req("source", Text),
            req("ref_id", Text),
            req("command_name", Text),
        ],
        primary_key: &["source", "ref_id", "command_name"],
        unique: &[],
    },
];

pub(super) const USAGE_INDICES: &[Index] = &[
    Index {
        name: "idx_usage_events_session",
        table: "usage_events",
        columns: &["session_id"],
    },
    Index {
        name: "idx_usage_events_user_time",
        table: "usage_events",
        columns: &["username", "occurred_at"],
    },
    Index {
        name: "idx_usage_events_user_id",
        table: "usage_events",
        columns: &["user_id"],
    },
    Index {
        name: "idx_usage_events_tool",
        table: "usage_events",
        columns: &["tool_name"],
    },
    Index {
        name: "idx_usage_events_source_ref",
        table: "usage_events",
        columns: &["source", "ref_id"],
    },
    Index {
        name: "idx_usage_summary_user",
        table: "usage_session_summary",
        columns: &["username"],
    },
    Index {
        name: "idx_usage_summary_user_id",
        table: "usage_session_summary",
        columns: &["user_id"],
    },
    Index {
        name: "idx_usage_summary_started",
        table: "usage_session_summary",
        columns: &["started_at"],
    },
    Index {
        name: "idx_usage_attr_skill",
        table: "usage_attribution_skills",
        columns: &["skill_name"],
    },
    Index {
        name: "idx_usage_attr_agent",
        table: "usage_attribution_agents",
        columns: &["agent_name"],
    },
    Index {
        name: "idx_usage_attr_command",
        table: "usage_attribution_commands",
        columns: &["command_name"],
    },
];

/// Saved observability views (v43).
pub(super) const USER_OBSERVABILITY_VIEWS: Table = Table {
    name: "user_observability_views",
    columns: &[
        req("id", Text),
        req("user_id", Text),
        req("name", Text),
        req("query_json", Text),
        col("created_at", Text),
    ],
    primary_key: &["id"],
    unique: &[&["user_id", "name"]],
};

pub(super) const OBSERVABILITY_VIEW_INDICES: &[Index] = &[Index {
    name: "idx_obs_views_user",
    table: "user_observability_views",
    columns: &["user_id", "created_at"],
}];

/// Corporate memory (v51): knowledge items, one row each, with a revision every change
/// bumps (stale edits are refused by comparing it).
pub(super) const KNOWLEDGE_ITEMS: Table = Table {
    name: "knowledge_items",
    columns: &[
        req("id", Text),
        req("title", Text),
        col("content", Text),
        col("category", Text),
        col("tags", Text),
        with_default("status", Text, Default::Text("pending")),
        col("source_user", Text),
        col("created_by", Text),
        col("audience", Text),
        with_default("confidence_milli", Int, Default::Int(500)),
        col("domain", Text),
        col("entities", Text),
        with_default("source_type", Text, Default::Text("api")),
        col("source_ref", Text),
        with_default("is_personal", Bool, Default::Bool(false)),
        with_default("revision", Int, Default::Int(1)),
        with_default("upvotes", Int, Default::Int(0)),
        with_default("downvotes", Int, Default::Int(0)),
        col("created_at", Text),
        col("updated_at", Text),
    ],
    primary_key: &["id"],
    unique: &[],
};

/// One user's vote on one item.
pub(super) const KNOWLEDGE_VOTES: Table = Table {
    name: "knowledge_votes",
    columns: &[
        req("item_id", Text),
        req("user_id", Text),
        req("vote", Int),
        col("voted_at", Text),
    ],
    primary_key: &["item_id", "user_id"],
    unique: &[],
};

pub(super) const KNOWLEDGE_INDICES: &[Index] = &[
    Index {
        name: "idx_knowledge_status_updated",
        table: "knowledge_items",
        columns: &["status", "updated_at"],
    },
    Index {
        name: "idx_knowledge_creator",
        table: "knowledge_items",
        columns: &["created_by", "updated_at"],
    },
    Index {
        name: "idx_knowledge_votes_user",
        table: "knowledge_votes",
        columns: &["user_id"],
    },
];

/// Corporate memory, second part (v52): an item's tags one row each (so the tree and the
/// stats group by tag in SQL), the keys duplicate detection matches on, contradictions and
/// duplicate candidates with their resolutions.
pub(super) const KNOWLEDGE_V52_COLUMNS: &[Column] = &[
    col("title_key", Text),
    col("content_key", Text),
    with_default("score", Int, Default::Int(0)),
    with_default("chars", Int, Default::Int(0)),
];

pub(super) const KNOWLEDGE_V52_TABLES: &[Table] = &[
    Table {
        name: "knowledge_item_tags",
        columns: &[req("item_id", Text), req("tag", Text)],
        primary_key: &["item_id", "tag"],
        unique: &[],
    },
    Table {
        name: "knowledge_contradictions",
        columns: &[
            req("id", Text),
            req("item_a_id", Text),
            req("item_b_id", Text),
            col("explanation", Text),
            with_default("severity", Text, Default::Text("medium")),
            col("suggested_resolution", Text),
            with_default("resolved", Bool, Default::Bool(false)),
            col("resolved_by", Text),
            col("resolved_at", Text),
            col("resolution", Text),
            col("created_by", Text),
            col("detected_at", Text),
        ],
        primary_key: &["id"],
        unique: &[],
    },
    Table {
        name: "knowledge_item_relations",
        columns: &[
            req("item_a_id", Text),
            req("item_b_id", Text),
            with_default("relation_type", Text, Default::Text("likely_duplicate")),
            with_default("score_milli", Int, Default::Int(0)),
            with_default("resolved", Bool, Default::Bool(false)),
            col("resolved_by", Text),
            col("resolved_at", Text),
            col("resolution", Text),
            col("created_at", Text),
        ],
        primary_key: &["item_a_id", "item_b_id", "relation_type"],
        unique: &[],
    },
];

pub(super) const KNOWLEDGE_V52_INDICES: &[Index] = &[
    Index {
        name: "idx_knowledge_tags_tag",
        table: "knowledge_item_tags",
        columns: &["tag", "item_id"],
    },
    Index {
        name: "idx_knowledge_domain_updated",
        table: "knowledge_items",
        columns: &["domain", "updated_at"],
    },
    Index {
        name: "idx_knowledge_category_updated",
        table: "knowledge_items",
        columns: &["category", "updated_at"],
    },
    Index {
        name: "idx_knowledge_audience_updated",
        table: "knowledge_items",
        columns: &["audience", "updated_at"],
    },
    Index {
        name: "idx_knowledge_updated",
        table: "knowledge_items",
        columns: &["updated_at", "id"],
    },
    // Covers the bundle's candidate read (state, visibility, rank inputs, size), so choosing
    // among tens of thousands of approved items never reads their rows.
    Index {
        name: "idx_knowledge_bundle",
        table: "knowledge_items",
        columns: &[
            "status",
            "is_personal",
            "audience",
            "domain",
            "confidence_milli",
            "updated_at",
            "chars",
            "id",
        ],
    },
    Index {
        name: "idx_knowledge_status_score",
        table: "knowledge_items",
        columns: &["status", "score", "updated_at"],
    },
    Index {
        name: "idx_knowledge_title_key",
        table: "knowledge_items",
        columns: &["title_key"],
    },
    Index {
        name: "idx_knowledge_content_key",
        table: "knowledge_items",
        columns: &["content_key"],
    },
    Index {
        name: "idx_knowledge_relations_b",
        table: "knowledge_item_relations",
        columns: &["item_b_id"],
    },
    Index {
        name: "idx_knowledge_contradictions_open",
        table: "knowledge_contradictions",
        columns: &["resolved", "detected_at"],
    },
];

/// Corporate memory, third part (v53): each tag row carries a copy of its item's change time
/// and the columns the readers' visibility filters on, kept in step with the item in the
/// same transaction, so the tag tree counts and lists a tag's items from one index instead
/// of joining a hundred thousand items to their tags.
pub(super) const KNOWLEDGE_V53_TAG_COLUMNS: &[Column] = &[
    col("item_updated_at", Text),
    col("status", Text),
    with_default("is_personal", Bool, Default::Bool(false)),
    col("audience", Text),
    col("domain", Text),
    col("source_type", Text),
];

pub(super) const KNOWLEDGE_V53_INDICES: &[Index] = &[Index {
    // Walked backwards per tag for a group's newest items; covers the visibility
    // filters, so counting a reader's groups never reads a row.
    name: "idx_knowledge_tags_recent",
    table: "knowledge_item_tags",
    columns: &[
        "tag",
        "item_updated_at",
        "item_id",
        "status",
        "is_personal",
        "audience",
        "domain",
        "source_type",
    ],
}];

/// Corporate memory, fourth part (v55): one tag row per item is marked as the one that counts
/// it, so the tag tree's total of distinct items comes from the same pass over tag rows that
/// counts each tag, and the covering index carries the mark; each item carries its change
/// time in unix seconds, so the bundle ranks its candidates in SQL with integer arithmetic.
pub(super) const KNOWLEDGE_V55_TAG_COLUMNS: &[Column] =
    &[with_default("counts_item", Bool, Default::Bool(false))];

pub(super) const KNOWLEDGE_V55_ITEM_COLUMNS: &[Column] = &[col("updated_epoch", Int)];

pub(super) const KNOWLEDGE_V55_INDICES: &[Index] = &[
    // Walked from the smallest for the bundle's "could anything still fit" check.
    Index {
        name: "idx_knowledge_bundle_smallest",
        table: "knowledge_items",
        columns: &["status", "is_personal", "chars"],
    },
    Index {
        // `idx_knowledge_bundle` with the change time in seconds: ranking a reader's
        // approved items still never reads a row.
        name: "idx_knowledge_bundle_rank",
        table: "knowledge_items",
        columns: &[
            "status",
            "is_personal",
            "audience",
            "domain",
            "confidence_milli",
            "updated_epoch",
            "chars",
            "id",
        ],
    },
    Index {
        // `idx_knowledge_tags_recent` with the mark: counting a reader's groups and items
        // still never reads a row.
        name: "idx_knowledge_tags_tree",
        table: "knowledge_item_tags",
        columns: &[
            "tag",
            "item_updated_at",
            "item_id",
            "status",
            "is_personal",
            "audience",
            "domain",
            "source_type",
            "counts_item",
        ],
    },
];

/// Corporate memory, fifth part (v56): the tree's group counts per axis, key and combination
/// of the columns readers' filters read, kept by triggers (`memory::counts`); `combo` writes
/// the key and those columns out as one string, so the upsert finds a row whatever is null.
pub(super) const KNOWLEDGE_TREE_COUNTS: Table = Table {
    name: "knowledge_tree_counts",
    columns: &[
        req("axis", Text),
        req("combo", Text),
        col("k", Text),
        col("status", Text),
        with_default("is_personal", Bool, Default::Bool(false)),
        col("audience", Text),
        col("domain", Text),
        col("source_type", Text),
        with_default("n", Int, Default::Int(0)),
    ],
    primary_key: &["axis", "combo"],
    unique: &[],
};

/// The bundle's candidates by change time (v56), replacing `idx_knowledge_bundle_rank`: the
/// ranking reads only candidates changed recently enough to rank among the best
/// (`memory::bundle`), from the index alone.
pub(super) const KNOWLEDGE_V56_INDICES: &[Index] = &[Index {
    name: "idx_knowledge_bundle_recent",
    table: "knowledge_items",
    columns: &[
        "status",
        "is_personal",
        "updated_epoch",
        "confidence_milli",
        "audience",
        "domain",
        "chars",
        "id",
    ],
}];

/// The bundle's candidates by confidence, then change time (v57), replacing
/// `idx_knowledge_bundle_recent`: within one confidence the rank follows the change time, so
/// a page is read as one short range per confidence (`memory::bundle`), from the index alone.
pub(super) const KNOWLEDGE_V57_INDICES: &[Index] = &[Index {
    name: "idx_knowledge_bundle_confidence",
    table: "knowledge_items",
    columns: &[
        "status",
        "is_personal",
        "confidence_milli",
        "updated_epoch",
        "audience",
        "domain",
        "chars",
        "id",
    ],
}];

/// The plugin marketplace (v52): registered curated marketplaces and the plugins a sync
/// found in them, user-submitted ("flea") entities, and each item's 30-day usage figures,
/// refreshed from the daily rollups.
pub(super) const MARKETPLACE_TABLES: &[Table] = &[
    Table {
        name: "marketplaces",
        columns: &[
            req("id", Text),
            req("name", Text),
            req("url", Text),
            col("branch", Text),
            col("created_by", Text),
            col("created_at", Text),
            col("last_synced_at", Text),
            col("last_commit", Text),
            col("last_error", Text),
            with_default("plugin_count", Int, Default::Int(0)),
        ],
        primary_key: &["id"],
        unique: &[],
    },
    Table {
        name: "marketplace_plugins",
        columns: &[
            req("marketplace_id", Text),
            req("name", Text),
            req("ref_id", Text),
            col("description", Text),
            col("version", Text),
            col("category", Text),
            col("author", Text),
            col("skills", Text),
            col("agents", Text),
            col("commands", Text),
            col("error", Text),
            col("created_at", Text),
            col("synced_at", Text),
        ],
        primary_key: &["marketplace_id", "name"],
        unique: &[],
    },
    Table {
        name: "flea_entities",
        columns: &[
            req("id", Text),
            req("name", Text),
            req("entity_type", Text),
            col("description", Text),
            col("category", Text),
            col("content", Text),
            col("skills", Text),
            col("agents", Text),
            col("commands", Text),
            with_default("status", Text, Default::Text("pending")),
            col("submitted_by", Text),
            col("submitter_email", Text),
            col("decided_by", Text),
            col("created_at", Text),
            col("updated_at", Text),
        ],
        primary_key: &["id"],
        unique: &[],
    },
    Table {
        name: "marketplace_item_stats",
        columns: &[
            req("source", Text),
            req("ref_id", Text),
            req("as_of", Text),
            with_default("invocations_30d", Int, Default::Int(0)),
            with_default("unique_users_30d", Int, Default::Int(0)),
            with_default("recent_7d", Int, Default::Int(0)),
            with_default("prior_7d", Int, Default::Int(0)),
            with_default("recent_users_7d", Int, Default::Int(0)),
        ],
        primary_key: &["source", "ref_id"],
        unique: &[],
    },
];

pub(super) const MARKETPLACE_INDICES: &[Index] = &[
    Index {
        name: "idx_marketplace_plugins_ref",
        table: "marketplace_plugins",
        columns: &["ref_id"],
    },
    Index {
        name: "idx_marketplace_plugins_created",
        table: "marketplace_plugins",
        columns: &["created_at"],
    },
    Index {
        name: "idx_flea_entities_status",
        table: "flea_entities",
        columns: &["status", "created_at"],
    },
    Index {
        name: "idx_flea_entities_submitter",
        table: "flea_entities",
        columns: &["submitted_by"],
    },
    Index {
        name: "idx_usage_file_daily_ref",
        table: "usage_file_daily",
        columns: &["ref_id", "day"],
    },
];

/// The persistent metadata cache for remote tables (v44), filled by metadata refreshes and
/// read by the catalog, which never calls a remote source itself.
pub(super) const TABLE_METADATA_CACHE: Table = Table {
    name: "table_metadata_cache",
    columns: &[
        req("table_id", Text),
        col("entity_type", Text),
        col("rows", Int),
        col("size_bytes", Int),
        col("partition_by", Text),
        col("clustered_by", Text),
        col("known_columns", Text),
        col("refreshed_at", Text),
        col("error_at", Text),
        col("error_msg", Text),
    ],
    primary_key: &["table_id"],
    unique: &[],
};

/// Sync state of tables with a local copy (v45): the last good sync is kept on error.
pub(super) const SYNC_STATE: Table = Table {
    name: "sync_state",
    columns: &[
        req("table_id", Text),
        col("status", Text),
        col("rows", Int),
        col("size_bytes", Int),
        col("hash", Text),
        col("last_success_at", Text),
        col("last_attempt_at", Text),
        col("last_error_at", Text),
        col("last_error", Text),
        col("duration_ms", Int),
    ],
    primary_key: &["table_id"],
    unique: &[],
};

/// Admin-registered scheduled SQL (v45).
pub(super) const SCRIPTS: Table = Table {
    name: "scripts",
    columns: &[
        req("id", Text),
        req("name", Text),
        req("sql", Text),
        col("schedule", Text),
        req("owner_id", Text),
        col("target_table", Text),
        col("created_at", Text),
        col("last_run", Text),
        col("last_status", Text),
        col("last_error", Text),
        col("last_rows", Int),
    ],
    primary_key: &["id"],
    unique: &[&["name"]],
};

/// Run leases on scripts (v46): which server process runs a claimed script, and until when
/// its claim holds.
/// Column types of remote tables' metadata (v47), for generated WHERE examples.
pub(super) const TABLE_METADATA_CACHE_V47_COLUMNS: &[Column] = &[col("column_types", Text)];

pub(super) const SCRIPTS_V46_COLUMNS: &[Column] =
    &[col("lease_owner", Text), col("lease_until", Text)];

/// The telemetry pipeline's memory of each session file (v48): what was processed (size,
/// mtime, content hash), what it yielded, and — for a file that keeps failing — the error
/// it is parked with until it changes or an administrator reprocesses it.
pub(super) const SESSION_FILE_STATE: Table = Table {
    name: "session_file_state",
    columns: &[
        req("session_file", Text),
        req("user_dir", Text),
        with_default("size", Int, Default::Int(0)),
        with_default("mtime_ns", Int, Default::Int(0)),
        col("content_hash", Text),
        col("processed_at", Text),
        with_default("events", Int, Default::Int(0)),
        with_default("lines", Int, Default::Int(0)),
        with_default("malformed_lines", Int, Default::Int(0)),
        col("problems", Text),
        with_default("failures", Int, Default::Int(0)),
        col("last_error", Text),
        with_default("parked", Bool, Default::Bool(false)),
    ],
    primary_key: &["session_file"],
    unique: &[],
};

/// One row per telemetry pipeline run (v48), shown by the pipeline endpoint.
pub(super) const TELEMETRY_RUNS: Table = Table {
    name: "telemetry_runs",
    columns: &[
        req("id", Text),
        req("trigger", Text),
        req("started_at", Text),
        col("finished_at", Text),
        col("status", Text),
        col("report", Text),
    ],
    primary_key: &["id"],
    unique: &[],
};

/// Named leases that keep a job to one runner across replicas (v48).
pub(super) const JOB_LEASES: Table = Table {
    name: "job_leases",
    columns: &[req("name", Text), req("owner", Text), req("until", Text)],
    primary_key: &["name"],
    unique: &[],
};

pub(super) const TELEMETRY_V48_INDICES: &[Index] = &[
    Index {
        name: "idx_usage_events_file",
        table: "usage_events",
        columns: &["session_file"],
    },
    Index {
        name: "idx_usage_events_time",
        table: "usage_events",
        columns: &["occurred_at"],
    },
    Index {
        name: "idx_telemetry_runs_started",
        table: "telemetry_runs",
        columns: &["started_at"],
    },
];

/// Where each session file's events now live, and the span they cover (v49): the events
/// moved out of `usage_events` into one parquet segment per file (see the internal
/// driver's `events` module); this row names the segment and its owner.
pub(super) const SESSION_FILE_STATE_V49_COLUMNS: &[Column] = &[
    col("segment", Text),
    col("user_id", Text),
    col("first_at", Text),
    col("last_at", Text),
];

/// Each session file's usage counts per day (v49): the rollups' source, small enough to
/// keep in the store, replaced with the file's segment in one transaction. One row per
/// (file, day, session, tool, source, plugin); `user_key` is the owner's id, or their
/// directory name when no user matches it.
pub(super) const USAGE_FILE_DAILY: Table = Table {
    name: "usage_file_daily",
    columns: &[
        req("session_file", Text),
        req("day", Text),
        req("session_id", Text),
        req("user_key", Text),
        col("tool_name", Text),
        req("source", Text),
        col("ref_id", Text),
        with_default("invocations", Int, Default::Int(0)),
        with_default("error_count", Int, Default::Int(0)),
    ],
    primary_key: &[],
    unique: &[],
};

pub(super) const USAGE_V49_INDICES: &[Index] = &[
    Index {
        name: "idx_usage_file_daily_file",
        table: "usage_file_daily",
        columns: &["session_file"],
    },
    Index {
        name: "idx_usage_file_daily_day",
        table: "usage_file_daily",
        columns: &["day"],
    },
    Index {
        name: "idx_session_file_state_user",
        table: "session_file_state",
        columns: &["user_id"],
    },
];

/// Event packs (v50): many session files' events in one parquet file sorted by time, so an
/// administrator's read opens a few large files instead of one small segment per file.
/// A pack is derived from its members' segments (which stay the source of truth); a file's
/// `pack` names the pack holding its current segment's events.
pub(super) const USAGE_EVENT_PACKS: Table = Table {
    name: "usage_event_packs",
    columns: &[
        req("name", Text),
        req("day", Text),
        req("first_at", Text),
        req("last_at", Text),
        with_default("events", Int, Default::Int(0)),
        with_default("bytes", Int, Default::Int(0)),
        req("created_at", Text),
    ],
    primary_key: &["name"],
    unique: &[],
};

pub(super) const SESSION_FILE_STATE_V50_COLUMNS: &[Column] = &[col("pack", Text)];

pub(super) const USAGE_V50_INDICES: &[Index] = &[
    Index {
        name: "idx_session_file_state_pack",
        table: "session_file_state",
        columns: &["pack"],
    },
    // The session list's default order (errors first, newest first), so a page is an index
    // walk instead of a sort of every summary.
    Index {
        name: "idx_usage_summary_errors_first",
        table: "usage_session_summary",
        columns: &[
            "(tool_errors > 0) DESC",
            "(started_at IS NULL)",
            "started_at DESC",
            "session_file",
        ],
    },
];

/// The audit log's counts per period, one row per dimension value (v58, with slices and
/// resources since v59, six-hour and week periods since v60; `audit::rollup`). `grain` is
/// `h`, `q` (six hours), `d` or `w`; `slice` is ``
/// for every row or `error` for failures only; `start` is the period's first store timestamp.
pub(super) const AUDIT_ROLLUP: Table = Table {
    name: "audit_rollup",
    columns: &[
        req("grain", Text),
        req("slice", Text),
        req("dim", Int),
        req("start", Text),
        req("value", Text),
        req("n", Int),
    ],
    primary_key: &["grain", "slice", "dim", "start", "value"],
    unique: &[],
};

/// The audit log's durations per hour and per day: how many rows took each whole
/// millisecond count (v58, sliced since v59), from which the cards' percentiles stay exact.
pub(super) const AUDIT_ROLLUP_MS: Table = Table {
    name: "audit_rollup_ms",
    columns: &[
        req("grain", Text),
        req("slice", Text),
        req("start", Text),
        req("ms", Int),
        req("n", Int),
    ],
    primary_key: &["grain", "slice", "start", "ms"],
    unique: &[],
};

/// Which hours the rollups cover (v58): one row, id 1.
pub(super) const AUDIT_ROLLUP_STATE: Table = Table {
    name: "audit_rollup_state",
    columns: &[
        req("id", Int),
        req("floor", Text),
        req("covered_from", Text),
        req("covered_until", Text),
    ],
    primary_key: &["id"],
    unique: &[],
};
