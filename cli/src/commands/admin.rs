//! `svc admin`: tables, users, groups, grants and telemetry (the server checks the caller
//! is an administrator).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::{activity, admin_sessions, marketplace, memory, seg, telemetry, views, Ctx};
use crate::client::Client;
use crate::exit::{CliError, Exit, Result};
use crate::progress;
use crate::render::{self, cell};

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Register a table (or replace its registration).
    RegisterTable {
        /// Table id (letters, digits, `_`, `.`, `-`).
        id: String,
        #[command(flatten)]
        fields: TableFields,
    },
    /// Every registered table.
    ListTables {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Change some fields of a registered table.
    UpdateTable {
        /// Table id.
        id: String,
        #[command(flatten)]
        fields: TableFields,
    },
    /// Remove a table from the registry (its data files stay).
    UnregisterTable {
        /// Table id.
        id: String,
    },
    /// Replace a local table's data with a parquet, CSV or newline-delimited JSON file
    /// (CSV and JSON are converted to parquet on the server; the columns are printed).
    Upload {
        /// Table id of a registered `local` table.
        id: String,
        /// The file to upload.
        file: PathBuf,
        /// The file's format (default: from its extension).
        #[arg(long, value_enum)]
        format: Option<UploadFormat>,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sync materialized and extracted tables now and wait for the outcome (rows, MB/s).
    Sync {
        /// Table ids or names.
        #[arg(required = true)]
        tables: Vec<String>,
        /// Rewrite each copy from scratch instead of incrementally (reconciles deletes).
        #[arg(long)]
        full: bool,
        /// Machine-readable output: the pass summary and each table's sync state.
        #[arg(long)]
        json: bool,
    },
    /// Operational databases tables are extracted from (`[data_source.integration.<name>]`).
    #[command(subcommand)]
    Integration(IntegrationCommand),
    /// Issue trackers whose webhooks svc receives (`[data_source.ticketing.<name>]`).
    #[command(subcommand)]
    Ticketing(super::ticketing::TicketingCommand),
    /// Users.
    #[command(subcommand)]
    User(UserCommand),
    /// Every user's personal access tokens: list and revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Groups and memberships.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Resource grants of groups.
    #[command(subcommand)]
    Grant(GrantCommand),
    /// The audit timeline, newest first (`--follow` to keep printing new rows).
    Activity(Box<activity::Command>),
    /// Corporate memory's review queue and decisions.
    #[command(subcommand)]
    Memory(memory::AdminCommand),
    /// Curated marketplaces, their syncs and the submissions queue.
    #[command(subcommand)]
    Marketplace(marketplace::AdminCommand),
    /// Your saved views of the observability pages.
    #[command(subcommand)]
    Views(views::ViewsCommand),
    /// Agents' tool usage: facets, KPIs, event pages and the summary.
    #[command(subcommand)]
    Telemetry(telemetry::Command),
    /// Deprecated name of `telemetry`.
    #[command(subcommand, hide = true)]
    Usage(telemetry::Command),
    /// Agents' sessions: list, KPIs, facets, transcripts, downloads.
    #[command(subcommand)]
    Sessions(admin_sessions::Command),
    /// One user's session files, or all of them as a ZIP (`--zip FILE`).
    UserSessions {
        /// User id or e-mail.
        user: String,
        /// Save every file of the user as one ZIP archive here.
        #[arg(long)]
        zip: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Removed: admins are the members of the Admin group.
    #[command(hide = true)]
    SetRole {
        /// Ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Formats an upload may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UploadFormat {
    /// A parquet file.
    Parquet,
    /// CSV with a header line.
    Csv,
    /// Newline-delimited JSON (one object per line).
    Ndjson,
}

impl UploadFormat {
    /// The format a file name implies.
    fn of_file(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            "jsonl" | "ndjson" | "json" => Some(Self::Ndjson),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Parquet => "parquet",
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
        }
    }
}

/// Uploads `file` as table `id`'s data.
fn upload(
    client: &Client,
    id: &str,
    file: &Path,
    format: Option<UploadFormat>,
    json_out: bool,
) -> Result<()> {
    let format = format
        .or_else(|| UploadFormat::of_file(file))
        .ok_or_else(|| {
            CliError::usage(format!(
                "Error: cannot tell the format of {} from its name",
                file.display()
            ))
            .hint("pass --format parquet, csv or ndjson")
        })?;
    let opened = std::fs::File::open(file)
        .and_then(|f| f.metadata().map(|m| (f, m.len())))
        .map_err(|e| CliError::usage(format!("Error: cannot read {}: {e}", file.display())))?;
    let (reader, size) = opened;
    let bar = progress::bytes(size, &format!("uploading {id}"));
    let body = reqwest::blocking::Body::sized(progress::Reading::new(reader, bar.clone()), size);
    let answer = client.upload_stream(
        reqwest::Method::PUT,
        &format!(
            "/api/admin/tables/{}/data?format={}",
            seg(id),
            format.name()
        ),
        "application/octet-stream",
        body,
    );
    bar.finish_and_clear();
    let answer = answer?;
    if json_out {
        render::print_json(&answer);
        return Ok(());
    }
    let columns = answer["columns"].as_array().cloned().unwrap_or_default();
    eprintln!(
        "uploaded {id}: {} rows, {} columns, {} bytes as parquet (sent {} bytes of {})",
        cell(&answer["rows"]),
        columns.len(),
        cell(&answer["bytes"]),
        cell(&answer["received_bytes"]),
        format.name()
    );
    let headers = ["COLUMN", "TYPE", "NULLABLE"].map(String::from);
    let rows: Vec<Vec<String>> = columns
        .iter()
        .map(|c| vec![cell(&c["name"]), cell(&c["type"]), cell(&c["nullable"])])
        .collect();
    render::table(&headers, &rows);
    Ok(())
}

/// Registry fields; only those given are sent.
#[derive(clap::Args, Debug, Default)]
pub struct TableFields {
    /// Display name.
    #[arg(long)]
    name: Option<String>,
    /// Source kind (`local`, `warehouse`, …).
    #[arg(long)]
    source_type: Option<String>,
    /// Grouping label (the dataset of a warehouse table).
    #[arg(long)]
    bucket: Option<String>,
    /// Name at the source.
    #[arg(long)]
    source_table: Option<String>,
    /// `local`, `remote` or `materialized`.
    #[arg(long)]
    query_mode: Option<String>,
    /// The connection of an integration table (its bucket).
    #[arg(long, conflicts_with = "bucket")]
    connection: Option<String>,
    /// Columns identifying a row (comma-separated): incremental syncs replace by key.
    #[arg(long)]
    primary_key: Option<String>,
    /// The column whose growth marks new and changed rows (incremental syncs).
    #[arg(long)]
    cursor_column: Option<String>,
    /// SQL of a materialized table, or `@file` to read it from a file.
    #[arg(long)]
    query: Option<String>,
    /// `every <N>m`, `every <N>h` or `daily HH:MM[,HH:MM...]`.
    #[arg(long)]
    sync_schedule: Option<String>,
    /// Free text for the catalog.
    #[arg(long)]
    description: Option<String>,
}

impl TableFields {
    fn body(self) -> Result<Map<String, Value>> {
        let query = match self.query {
            Some(q) if q.starts_with('@') => {
                Some(std::fs::read_to_string(&q[1..]).map_err(|e| {
                    CliError::usage(format!(
                        "Error: cannot read the query file {}: {e}",
                        &q[1..]
                    ))
                })?)
            }
            other => other,
        };
        let mut m = Map::new();
        for (k, v) in [
            ("name", self.name),
            ("source_type", self.source_type),
            ("bucket", self.bucket.or(self.connection)),
            ("source_table", self.source_table),
            ("query_mode", self.query_mode),
            ("source_query", query),
            ("primary_key", self.primary_key),
            ("cursor_column", self.cursor_column),
            ("sync_schedule", self.sync_schedule),
            ("description", self.description),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        Ok(m)
    }
}

#[derive(Subcommand, Debug)]
pub enum IntegrationCommand {
    /// The tables and views a connection offers, with the type each column would have.
    Discover {
        /// Connection name.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user (not an admin; add them to the Admin group for that).
    Add {
        /// E-mail.
        email: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Every user.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Stop a user's tokens from working.
    Deactivate {
        /// User id or e-mail.
        user: String,
    },
    /// Let a deactivated user back in.
    Activate {
        /// User id or e-mail.
        user: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Every user's tokens, newest first, revoked ones included.
    List {
        /// Only this owner's tokens (exact e-mail).
        #[arg(long)]
        user: Option<String>,
        /// Tokens per page (1-500).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Tokens to skip.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Machine-readable output (the whole page, with `total` and `next_offset`).
        #[arg(long)]
        json: bool,
    },
    /// Revoke any user's token by id (it stops working at once).
    Revoke {
        /// Token id (`svc admin token list` shows them).
        id: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// Every group.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Create a group.
    Create {
        /// Name.
        name: String,
        /// Description.
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a group.
    Delete {
        /// Group id or name.
        group: String,
    },
    /// A group's members.
    Members {
        /// Group id or name.
        group: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Add a user to a group.
    AddMember {
        /// Group id or name.
        group: String,
        /// User e-mail.
        email: String,
    },
    /// Remove a user from a group.
    RemoveMember {
        /// Group id or name.
        group: String,
        /// User e-mail or id.
        user: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum GrantCommand {
    /// Every grant.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Let a group read a table.
    Create {
        /// Group id or name.
        group: String,
        /// Table id.
        resource_id: String,
        /// Resource type.
        #[arg(long = "type", default_value = "table")]
        resource_type: String,
    },
    /// Remove a grant.
    Delete {
        /// Grant id.
        id: String,
    },
}

/// What `set-role` (top-level or under `admin`) says: roles were replaced by groups.
pub fn set_role_removed(args: &[String]) -> CliError {
    let user = args.first().map_or("<user>", String::as_str);
    CliError::usage(format!(
        "Error: 'set-role' was removed.\n  Roles were replaced by group memberships. Make '{user}' an admin with:\n    svc admin group add-member Admin {user}"
    ))
}

/// Runs an `svc admin` command.
pub fn run(ctx: &Ctx, cmd: Command) -> Result<()> {
    if let Command::SetRole { args } = &cmd {
        return Err(set_role_removed(args));
    }
    let client = ctx.authed()?;
    match cmd {
        Command::RegisterTable { id, fields } => {
            let mut body = fields.body()?;
            body.insert("id".into(), json!(id));
            let row = client.json(
                Method::POST,
                "/api/admin/register-table",
                Some(&Value::Object(body)),
            )?;
            eprintln!("registered {}", cell(&row["id"]));
        }
        Command::Sync { tables, full, json } => sync(&client, &tables, full, json)?,
        Command::Ticketing(cmd) => super::ticketing::run(&client, cmd)?,
        Command::Integration(IntegrationCommand::Discover { name, json }) => {
            let doc = client.get(&format!("/api/admin/integration/{}/tables", seg(&name)))?;
            if json {
                render::print_json(&doc);
            } else {
                let headers =
                    ["TABLE", "KIND", "ROWS~", "COLUMN", "TYPE", "SOURCE TYPE"].map(String::from);
                let mut out = Vec::new();
                for t in doc["tables"].as_array().into_iter().flatten() {
                    let table = format!("{}.{}", cell(&t["schema"]), cell(&t["name"]));
                    for (i, c) in t["columns"].as_array().into_iter().flatten().enumerate() {
                        let first = i == 0;
                        out.push(vec![
                            if first { table.clone() } else { String::new() },
                            if first {
                                cell(&t["kind"])
                            } else {
                                String::new()
                            },
                            if first {
                                cell(&t["estimated_rows"])
                            } else {
                                String::new()
                            },
                            cell(&c["name"]),
                            cell(&c["type"]),
                            cell(&c["description"]),
                        ]);
                    }
                }
                render::table(&headers, &out);
            }
        }
        Command::ListTables { json } => {
            let list = client.get("/api/admin/registry")?;
            if json {
                render::print_json(&list);
            } else {
                let headers =
                    ["ID", "SOURCE", "MODE", "BUCKET", "SCHEDULE", "NAME"].map(String::from);
                let rows = rows(
                    &list["tables"],
                    &[
                        "id",
                        "source_type",
                        "query_mode",
                        "bucket",
                        "sync_schedule",
                        "name",
                    ],
                );
                render::table(&headers, &rows);
            }
        }
        Command::UpdateTable { id, fields } => {
            let body = fields.body()?;
            if body.is_empty() {
                return Err(CliError::usage(
                    "Error: nothing to change; give at least one field flag",
                ));
            }
            client.json(
                Method::PUT,
                &format!("/api/admin/registry/{}", seg(&id)),
                Some(&Value::Object(body)),
            )?;
            eprintln!("updated {id}");
        }
        Command::UnregisterTable { id } => {
            client.json(
                Method::DELETE,
                &format!("/api/admin/registry/{}", seg(&id)),
                None,
            )?;
            eprintln!("unregistered {id}");
        }
        Command::Upload {
            id,
            file,
            format,
            json,
        } => upload(&client, &id, &file, format, json)?,
        Command::User(u) => user(&client, u)?,
        Command::Token(t) => token(&client, t)?,
        Command::Group(g) => group(&client, g)?,
        Command::Grant(g) => grant(&client, g)?,
        Command::Activity(a) => activity::run(&client, *a)?,
        Command::Views(v) => views::views(&client, v)?,
        Command::Memory(m) => memory::admin(&client, m)?,
        Command::Marketplace(m) => marketplace::admin(&client, m)?,
        Command::Telemetry(t) => telemetry::run(&client, t)?,
        Command::Usage(t) => {
            eprintln!("warning: `svc admin usage` is deprecated; use `svc admin telemetry`");
            telemetry::run(&client, t)?
        }
        Command::Sessions(c) => admin_sessions::run(&client, c)?,
        Command::UserSessions { user, zip, json } => {
            let id = user_id(&client, &user)?;
            admin_sessions::user_sessions(&client, &id, zip, json)?
        }
        Command::SetRole { .. } => unreachable!("answered above"),
    }
    Ok(())
}

fn rows(list: &Value, keys: &[&str]) -> Vec<Vec<String>> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|r| keys.iter().map(|k| cell(&r[*k])).collect())
        .collect()
}

/// A user's id from an id or an e-mail.
pub(super) fn user_id(client: &Client, user: &str) -> Result<String> {
    let users = client.get("/api/admin/users")?;
    users
        .as_array()
        .into_iter()
        .flatten()
        .find(|u| u["id"] == user || u["email"] == user)
        .map(|u| cell(&u["id"]))
        .ok_or_else(|| CliError::new(Exit::Denied, format!("Error: no user '{user}'")))
}

/// A group's id from an id or a name.
fn group_id(client: &Client, group: &str) -> Result<String> {
    let groups = client.get("/api/admin/groups")?;
    groups
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["id"] == group || g["name"] == group)
        .map(|g| cell(&g["id"]))
        .ok_or_else(|| CliError::new(Exit::Denied, format!("Error: no group '{group}'")))
}

fn user(client: &Client, cmd: UserCommand) -> Result<()> {
    match cmd {
        UserCommand::Add { email, name } => {
            let u = client.json(
                Method::POST,
                "/api/admin/users",
                Some(&json!({"email": email, "name": name})),
            )?;
            println!("{}", cell(&u["id"]));
        }
        UserCommand::List { json } => {
            let list = client.get("/api/admin/users")?;
            if json {
                render::print_json(&list);
            } else {
                let headers = ["ID", "EMAIL", "NAME", "ACTIVE", "ADMIN"].map(String::from);
                render::table(
                    &headers,
                    &rows(&list, &["id", "email", "name", "active", "is_admin"]),
                );
            }
        }
        UserCommand::Deactivate { user } => {
            let id = user_id(client, &user)?;
            client.json(
                Method::POST,
                &format!("/api/admin/users/{}/deactivate", seg(&id)),
                None,
            )?;
            eprintln!("deactivated {user}");
        }
        UserCommand::Activate { user } => {
            let id = user_id(client, &user)?;
            client.json(
                Method::POST,
                &format!("/api/admin/users/{}/activate", seg(&id)),
                None,
            )?;
            eprintln!("activated {user}");
        }
    }
    Ok(())
}

fn token(client: &Client, cmd: TokenCommand) -> Result<()> {
    match cmd {
        TokenCommand::List {
            user,
            limit,
            offset,
            json,
        } => {
            let mut path = format!("/api/admin/tokens?limit={limit}&offset={offset}");
            if let Some(user) = user {
                path.push_str(&format!("&user={}", seg(&user)));
            }
            let page = client.get(&path)?;
            if json {
                render::print_json(&page);
                return Ok(());
            }
            let headers = [
                "ID",
                "OWNER",
                "NAME",
                "PREFIX",
                "EXPIRES",
                "LAST USED",
                "FROM",
                "STATUS",
            ]
            .map(String::from);
            let rows: Vec<Vec<String>> = page["tokens"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    vec![
                        cell(&t["id"]),
                        cell(&t["user_email"]),
                        cell(&t["name"]),
                        cell(&t["prefix"]),
                        t["expires_at"].as_str().unwrap_or("never").to_owned(),
                        cell(&t["last_used_at"]),
                        cell(&t["last_used_ip"]),
                        super::auth::token_status(t).to_owned(),
                    ]
                })
                .collect();
            render::table(&headers, &rows);
            if let Some(next) = page["next_offset"].as_u64() {
                eprintln!(
                    "{} of {} tokens shown; next page: --offset {next}",
                    rows.len(),
                    cell(&page["total"])
                );
            }
        }
        TokenCommand::Revoke { id } => {
            client.json(
                Method::DELETE,
                &format!("/api/admin/tokens/{}", seg(&id)),
                None,
            )?;
            eprintln!("Token {id} revoked");
        }
    }
    Ok(())
}

fn group(client: &Client, cmd: GroupCommand) -> Result<()> {
    match cmd {
        GroupCommand::List { json } => {
            let list = client.get("/api/admin/groups")?;
            if json {
                render::print_json(&list);
            } else {
                let headers = ["ID", "NAME", "MEMBERS", "GRANTS", "SYSTEM"].map(String::from);
                render::table(
                    &headers,
                    &rows(
                        &list,
                        &["id", "name", "member_count", "grant_count", "is_system"],
                    ),
                );
            }
        }
        GroupCommand::Create { name, description } => {
            let g = client.json(
                Method::POST,
                "/api/admin/groups",
                Some(&json!({"name": name, "description": description})),
            )?;
            println!("{}", cell(&g["id"]));
        }
        GroupCommand::Delete { group } => {
            let id = group_id(client, &group)?;
            client.json(
                Method::DELETE,
                &format!("/api/admin/groups/{}", seg(&id)),
                None,
            )?;
            eprintln!("deleted group {group}");
        }
        GroupCommand::Members { group, json } => {
            let id = group_id(client, &group)?;
            let list = client.get(&format!("/api/admin/groups/{}/members", seg(&id)))?;
            if json {
                render::print_json(&list);
            } else {
                let headers = ["USER ID", "EMAIL", "NAME", "SOURCE"].map(String::from);
                render::table(
                    &headers,
                    &rows(&list, &["user_id", "email", "name", "source"]),
                );
            }
        }
        GroupCommand::AddMember { group, email } => {
            let id = group_id(client, &group)?;
            client.json(
                Method::POST,
                &format!("/api/admin/groups/{}/members", seg(&id)),
                Some(&json!({"email": email})),
            )?;
            eprintln!("added {email} to {group}");
        }
        GroupCommand::RemoveMember { group, user } => {
            let id = group_id(client, &group)?;
            let uid = user_id(client, &user)?;
            client.json(
                Method::DELETE,
                &format!("/api/admin/groups/{}/members/{}", seg(&id), seg(&uid)),
                None,
            )?;
            eprintln!("removed {user} from {group}");
        }
    }
    Ok(())
}

fn grant(client: &Client, cmd: GrantCommand) -> Result<()> {
    match cmd {
        GrantCommand::List { json } => {
            let list = client.get("/api/admin/grants")?;
            if json {
                render::print_json(&list);
            } else {
                let headers = ["ID", "GROUP", "TYPE", "RESOURCE"].map(String::from);
                render::table(
                    &headers,
                    &rows(&list, &["id", "group_name", "resource_type", "resource_id"]),
                );
            }
        }
        GrantCommand::Create {
            group,
            resource_id,
            resource_type,
        } => {
            let gid = group_id(client, &group)?;
            let g = client.json(
                Method::POST,
                "/api/admin/grants",
                Some(&json!({"group_id": gid, "resource_type": resource_type, "resource_id": resource_id})),
            )?;
            println!("{}", cell(&g["id"]));
        }
        GrantCommand::Delete { id } => {
            client.json(
                Method::DELETE,
                &format!("/api/admin/grants/{}", seg(&id)),
                None,
            )?;
            eprintln!("deleted grant {id}");
        }
    }
    Ok(())
}

/// Triggers a sync of `tables` and waits for the pass to finish, then prints each table's
/// outcome (rows, size, MB/s, notes). Fails when any table failed.
fn sync(client: &Client, tables: &[String], full: bool, json_out: bool) -> Result<()> {
    let body = json!({"tables": tables, "full": full});
    client.json(Method::POST, "/api/sync/trigger", Some(&body))?;
    let bar = progress::counter("rows", &format!("syncing {}", tables.join(", ")));
    let mut syncing = String::new();
    let status = loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let status = client.get("/api/sync/status")?;
        if status["locked"] != json!(true) && !status["last_pass"]["finished_at"].is_null() {
            break status;
        }
        // The table the pass is on, and its rows and bytes so far.
        let current = &status["current"];
        if let Some(table) = current["table_id"].as_str() {
            if table != syncing {
                syncing = table.to_owned();
                bar.reset();
            }
            bar.set_position(current["rows"].as_u64().unwrap_or(0));
            bar.set_message(format!(
                "syncing {table}: {:.1} MB written,",
                current["bytes"].as_f64().unwrap_or(0.0) / 1e6
            ));
        }
    };
    bar.finish_and_clear();
    let pass = &status["last_pass"];
    if json_out {
        render::print_json(&status);
    } else {
        let rows: Vec<Vec<String>> = status["tables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| tables.iter().any(|n| t["table_id"] == json!(n)))
            .map(|t| {
                let mb_s = match (t["size_bytes"].as_f64(), t["duration_ms"].as_f64()) {
                    (Some(b), Some(ms)) if ms > 0.0 => format!("{:.1}", b / 1e6 / (ms / 1e3)),
                    _ => String::new(),
                };
                vec![
                    cell(&t["table_id"]),
                    cell(&t["status"]),
                    cell(&t["rows"]),
                    cell(&t["size_bytes"]),
                    cell(&t["duration_ms"]),
                    mb_s,
                    cell(&t["last_error"]),
                ]
            })
            .collect();
        render::table(
            &["TABLE", "STATUS", "ROWS", "BYTES", "MS", "MB/S", "ERROR"].map(String::from),
            &rows,
        );
        for (table, notes) in pass["notes"].as_object().into_iter().flatten() {
            for note in notes.as_array().into_iter().flatten() {
                eprintln!("  {table}: {}", note.as_str().unwrap_or_default());
            }
        }
        for unknown in pass["unknown"].as_array().into_iter().flatten() {
            eprintln!(
                "  {}: no materialized table by that id or name",
                cell(unknown)
            );
        }
    }
    let failed = pass["errors"].as_array().map_or(0, Vec::len);
    if failed > 0 || pass["unknown"].as_array().is_some_and(|u| !u.is_empty()) {
        let synced = pass["materialized"].as_array().map_or(0, Vec::len);
        return Err(CliError::new(
            if synced > 0 {
                Exit::Partial
            } else {
                Exit::Server
            },
            format!("Error: {synced} of {} tables synced", tables.len()),
        ));
    }
    Ok(())
}
