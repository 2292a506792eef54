//! `svc`, the command-line client. It speaks HTTP to `svc-server` only and never links the
//! host. The commands (auth, catalog, schema, sample, query, snapshots, admin) arrive with
//! the CLI issue; this binary already answers `--version` and `--help`.

use clap::Parser;

/// svc — discover, sample and query the tables registered on an svc server.
#[derive(Parser, Debug)]
#[command(name = "svc", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
    eprintln!("svc: no commands yet; see `svc --help`");
    std::process::exit(2);
}
