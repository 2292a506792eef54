//! `svc`, the command-line client for analysts and agents. It speaks HTTP to `svc-server`
//! only and never links the host. Every read command has `--json`; failures exit with the
//! documented codes and an error rendered from the server's `detail`.

mod client;
mod commands;
mod config;
mod exit;
mod interrupt;
mod output;
mod progress;
mod render;
mod workspace;

use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use commands::{
    admin, auth, discovery, marketplace, mcp, me, memory, pull, query, sessions, snapshot, Ctx,
};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  2  usage: bad flags or values, no server configured, client too old for the server
  3  rate limited or over a quota (HTTP 429)
  4  partly done: svc pull skipped tables that have no data yet (the rest were pulled), or
     a file output holds only the first rows the server allows (pass --limit to accept)
  5  the server failed (HTTP 5xx) or could not be reached
  6  the snapshot exists (use --force); the file is left untouched
  7  not logged in, or the token was refused (HTTP 401)
  8  forbidden or not found (HTTP 403, 404; an unknown table, whichever command names it)
  9  any other refusal (HTTP 400, 409, 422, ...)

Environment: SVC_SERVER and SVC_TOKEN override the saved config (~/.config/svc/config.toml,
or $SVC_CONFIG_DIR); NO_COLOR turns colour off.";

/// svc — discover, sample and query the tables registered on an svc server.
#[derive(Parser, Debug)]
#[command(name = "svc", version, about, after_help = EXIT_CODES)]
struct Cli {
    /// Server URL (overrides SVC_SERVER and the saved config).
    #[arg(long, global = true)]
    server: Option<String>,
    /// Bearer token (overrides SVC_TOKEN and the saved config).
    #[arg(long, global = true, hide_env_values = true)]
    token: Option<String>,
    /// Seconds a query, scan or download may take (ordinary calls time out after 30 s).
    #[arg(long, global = true, default_value_t = 600)]
    timeout: u64,
    /// Local workspace for pulled tables and snapshots [default: SVC_WORKSPACE, else
    /// ~/.local/share/svc].
    #[arg(long, global = true)]
    workspace: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Log in and out; personal access tokens.
    #[command(subcommand)]
    Auth(auth::Command),
    /// The tables you can read.
    Catalog {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// A table's columns.
    Schema {
        /// Table id.
        table: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// A table's first rows.
    Sample {
        /// Table id.
        table: String,
        /// Rows (1–100).
        #[arg(short, long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        n: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Schema and sample together.
    Describe {
        /// Table id.
        table: String,
        /// Rows (1–100).
        #[arg(short, long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        n: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Run SQL on the server (or with --local over pulled tables and snapshots).
    Query(query::QueryArgs),
    /// Save a scan of one table as local parquet.
    #[command(subcommand)]
    Snapshot(snapshot::Command),
    /// Download every local or materialized table you can read (only changed files).
    Pull {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Upload agent session transcripts (they become your telemetry).
    #[command(subcommand)]
    Sessions(sessions::Command),
    /// Your own usage: token counts of your agent sessions.
    #[command(subcommand)]
    Me(me::Command),
    /// Corporate memory: contribute, read, vote, and the agents' bundle.
    #[command(subcommand)]
    Memory(memory::Command),
    /// The plugin marketplace: what agents use most, and submissions.
    #[command(subcommand)]
    Marketplace(marketplace::Command),
    /// Administration (admins only).
    #[command(subcommand)]
    Admin(admin::Command),
    /// Serve MCP on standard input/output for an agent host, forwarding to the server with
    /// your token (`claude mcp add svc -- svc mcp`).
    Mcp,
    /// Removed: admins are the members of the Admin group (`svc admin group add-member`).
    #[command(hide = true)]
    SetRole {
        /// Ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn run(cli: Cli) -> exit::Result<()> {
    let root = workspace::root(cli.workspace.as_deref());
    let ctx = Ctx {
        server: cli.server,
        token: cli.token,
        long_timeout: Duration::from_secs(cli.timeout.max(1)),
    };
    match cli.command {
        Command::Auth(c) => auth::run(&ctx, c),
        Command::Catalog { json } => discovery::catalog(&ctx, json),
        Command::Schema { table, json } => discovery::schema(&ctx, &table, json),
        Command::Sample { table, n, json } => discovery::sample(&ctx, &table, n, json),
        Command::Describe { table, n, json } => discovery::describe(&ctx, &table, n, json),
        Command::Query(args) => query::run(&ctx, &root, args),
        Command::Snapshot(c) => snapshot::run(&ctx, &root, c),
        Command::Pull { json } => pull::run(&ctx, &root, json),
        Command::Sessions(c) => sessions::run(&ctx, c),
        Command::Me(c) => me::run(&ctx, c),
        Command::Memory(c) => memory::run(&ctx, c),
        Command::Marketplace(c) => marketplace::run(&ctx, c),
        Command::Admin(c) => admin::run(&ctx, c),
        Command::Mcp => mcp::run(&ctx),
        Command::SetRole { args } => Err(admin::set_role_removed(&args)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "svc", &mut std::io::stdout());
            Ok(())
        }
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; clap exits 2 on usage errors.
            e.exit();
        }
    };
    interrupt::install();
    quiet_panics();
    if let Err(e) = run(cli) {
        if e.exit != exit::Exit::OutputClosed {
            eprintln!("{e}");
        }
        std::process::exit(e.exit as i32);
    }
}

/// `println!` panics when standard output is closed (`svc … | head`); that is a normal end,
/// so it exits 0 quietly, like ripgrep. Any other panic prints one line, never a backtrace.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("unknown failure");
        if message.contains("Broken pipe") || message.contains("BrokenPipe") {
            std::process::exit(0);
        }
        let at = info
            .location()
            .map(|l| format!(" ({}:{})", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("svc: internal error: {message}{at}; please report it");
        // Shipped builds abort on panic (the `dist-cli` profile): end with the documented
        // "other" code instead of a SIGABRT and a core dump.
        if cfg!(panic = "abort") {
            std::process::exit(exit::Exit::Other as i32);
        }
    }));
}
