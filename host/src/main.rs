//! `svc-server`: serve the API, or administer the store from a shell.

use std::io::Read as _;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use svc_host::config::StoreArgs;
use svc_host::ops::logs::LogFormat;
use svc_host::ops::traces::Tracing;
use svc_host::server::{self, ServeArgs};
use svc_host::state::AppState;
use svc_store as store;
use svc_store::audit::Actor;

mod allocator;

/// svc-server — data access and observability for analysts and their AI agents.
#[derive(Parser, Debug)]
#[command(name = "svc-server", version, about)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the HTTP server.
    Serve(Box<ServeArgs>),
    /// Bring the state store's schema up to date and exit.
    Migrate,
    /// Print the OpenAPI document (JSON) and exit.
    Openapi,
    /// Manage users.
    #[command(subcommand)]
    Users(UsersCmd),
    /// Manage personal access tokens.
    #[command(subcommand)]
    Tokens(TokensCmd),
    /// Manage group memberships.
    #[command(subcommand)]
    Groups(GroupsCmd),
    /// Manage table grants.
    #[command(subcommand)]
    Grants(GrantsCmd),
}

#[derive(Subcommand, Debug)]
enum UsersCmd {
    /// Create a user.
    Create {
        /// E-mail (unique).
        #[arg(long)]
        email: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
        /// Add the user to the Admin group.
        #[arg(long)]
        admin: bool,
        /// Read a password from standard input (otherwise the user logs in with tokens only).
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a user's password, read from standard input (the first admin has none).
    SetPassword {
        /// The user's e-mail.
        #[arg(long)]
        email: String,
        /// Read the password from standard input (required: a password never goes on the
        /// command line, where other users and shell history see it).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// List users.
    List,
}

#[derive(Subcommand, Debug)]
enum TokensCmd {
    /// Create a personal access token and print it (alone) to standard output.
    Create {
        /// The owner's e-mail.
        #[arg(long)]
        email: String,
        /// A label for the token.
        #[arg(long, default_value = "svc-server")]
        name: String,
        /// Lifetime in days (1–3650); omit for no expiry.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=3650))]
        days: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
enum GroupsCmd {
    /// Add a user to a group (the group is created if missing).
    AddMember {
        /// Group name.
        #[arg(long)]
        group: String,
        /// User e-mail.
        #[arg(long)]
        email: String,
    },
    /// Remove a user from a group.
    RemoveMember {
        /// Group name.
        #[arg(long)]
        group: String,
        /// User e-mail.
        #[arg(long)]
        email: String,
    },
}

#[derive(Subcommand, Debug)]
enum GrantsCmd {
    /// Grant a table to a group (the group is created if missing).
    Add {
        /// Group name.
        #[arg(long)]
        group: String,
        /// Table id.
        #[arg(long)]
        table: String,
    },
    /// Revoke a table grant.
    Remove {
        /// Group name.
        #[arg(long)]
        group: String,
        /// Table id.
        #[arg(long)]
        table: String,
    },
}

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A traced worker's spans wait on it until it next goes idle.
        .on_thread_park(svc_trace::idle)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(main_in_runtime()),
        Err(e) => {
            eprintln!("svc-server: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn main_in_runtime() -> std::process::ExitCode {
    let format = match LogFormat::from_env(std::env::var("SVC_LOG_FORMAT").ok().as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("svc-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // Held to the end: dropping it flushes the spans still queued.
    let _tracing = match Tracing::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("svc-server: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    svc_host::ops::logs::init(format);
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("svc-server: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let args = cli.store;
    match cli.command {
        Command::Serve(serve) => server::serve(args, *serve).await,
        Command::Migrate => {
            let url = args.url();
            let s = store::Store::open(&url).await?;
            s.seed_system_groups().await?;
            eprintln!(
                "state store {} is at schema v{}",
                store::redact_url(&url),
                s.schema_version().await?
            );
            s.close().await;
            Ok(())
        }
        Command::Openapi => {
            // The document depends on the code only; an in-memory store stands in.
            let s = store::Store::connect("sqlite::memory:").await?;
            let state = AppState::new(s, b"unused", server::console_config(args.data_dir.clone()));
            println!("{}", svc_host::api::openapi_json(&state));
            Ok(())
        }
        other => {
            let state = server::open_state(
                &args,
                server::console_config(args.data_dir.clone()),
                server::Opening::MustExist,
            )
            .await?;
            let result = console(&state, other).await;
            state.audit.flush().await;
            state.store.close().await;
            result
        }
    }
}

/// A password from standard input, without its line ending.
fn read_password() -> anyhow::Result<String> {
    let mut p = String::new();
    std::io::stdin().read_to_string(&mut p)?;
    Ok(p.trim_end_matches(['\r', '\n']).to_string())
}

async fn user(state: &AppState, email: &str) -> anyhow::Result<svc_store::users::User> {
    state
        .store
        .user_by_email(email)
        .await?
        .with_context(|| format!("no user with e-mail {email}"))
}

async fn console(state: &Arc<AppState>, command: Command) -> anyhow::Result<()> {
    let actor = Actor::console();
    match command {
        Command::Users(UsersCmd::Create {
            email,
            name,
            admin,
            password_stdin,
        }) => {
            let password = if password_stdin {
                Some(read_password()?)
            } else {
                None
            };
            let u = state
                .admin
                .create_user(&actor, &email, name.as_deref(), password.as_deref(), admin)
                .await?;
            println!("{}", u.id);
        }
        Command::Users(UsersCmd::SetPassword { email, .. }) => {
            let u = user(state, &email).await?;
            let password = read_password()?;
            state.admin.set_password(&actor, &u, &password).await?;
            eprintln!("password set for {email}; log in with `svc auth login`");
        }
        Command::Users(UsersCmd::List) => {
            for u in state.store.list_users().await? {
                let is_admin = state.store.is_admin(&u.id).await?;
                println!(
                    "{}\t{}\t{}\t{}",
                    u.id,
                    u.email,
                    if u.active { "active" } else { "deactivated" },
                    if is_admin { "admin" } else { "" }
                );
            }
        }
        Command::Tokens(TokensCmd::Create { email, name, days }) => {
            let u = user(state, &email).await?;
            let (_, token) = state.admin.create_token(&actor, &u, &name, days).await?;
            println!("{token}");
        }
        Command::Groups(GroupsCmd::AddMember { group, email }) => {
            let u = user(state, &email).await?;
            let g = state.admin.ensure_group(&actor, &group).await?;
            if !state.admin.add_member(&actor, &g, &u).await? {
                eprintln!("{email} is already a member of {group}");
            }
        }
        Command::Groups(GroupsCmd::RemoveMember { group, email }) => {
            let u = user(state, &email).await?;
            let g = state
                .store
                .group_by_name(&group)
                .await?
                .with_context(|| format!("no group named {group}"))?;
            state.admin.remove_member(&actor, &g, &u).await?;
        }
        Command::Grants(GrantsCmd::Add { group, table }) => {
            let g = state.admin.ensure_group(&actor, &group).await?;
            state
                .admin
                .create_grant(&actor, &g, "table", &table)
                .await?;
        }
        Command::Grants(GrantsCmd::Remove { group, table }) => {
            let g = state
                .store
                .group_by_name(&group)
                .await?
                .with_context(|| format!("no group named {group}"))?;
            let grant = state
                .store
                .find_grant(&g.id, "table", &table)
                .await?
                .with_context(|| format!("group {group} has no grant on table {table}"))?;
            state.admin.delete_grant(&actor, &grant).await?;
        }
        Command::Serve(_) | Command::Migrate | Command::Openapi => unreachable!("handled by run"),
    }
    Ok(())
}
