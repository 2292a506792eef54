//! `svc auth`: log in and out, who am I, personal access tokens.

use std::io::{BufRead, IsTerminal, Write};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::{seg, Ctx};
use crate::config::{self, Saved};
use crate::exit::{CliError, Exit, Result};
use crate::render;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Log in with e-mail and password (the password is read from the terminal, or from the
    /// first line of stdin when that is not a terminal), or with `--token TOKEN` save a
    /// personal access token after checking it with the server.
    Login {
        /// Account e-mail (prompted when missing).
        #[arg(long)]
        email: Option<String>,
    },
    /// Forget the saved token.
    Logout,
    /// Ask the server who the token belongs to.
    Whoami {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Personal access tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a token; it is printed once.
    Create {
        /// A label to recognise it by.
        #[arg(long)]
        name: String,
        /// Lifetime in days (1–3650); without it the token never expires.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=3650))]
        days: Option<i64>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Your tokens.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id or name.
    Revoke {
        /// Token id or name.
        #[arg(value_name = "ID_OR_NAME")]
        which: String,
    },
}

fn prompt(label: &str) -> Result<String> {
    eprint!("{label}: ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// Runs an `svc auth` command.
pub fn run(ctx: &Ctx, cmd: Command) -> Result<()> {
    match cmd {
        Command::Login { email } => login(ctx, email, ctx.token.clone()),
        Command::Logout => {
            let mut saved = Saved::load()?;
            saved.token = None;
            saved.email = None;
            saved.save()?;
            eprintln!(
                "Logged out (token removed from {})",
                config::dir().display()
            );
            Ok(())
        }
        Command::Whoami { json } => {
            let me = ctx.authed()?.get("/api/me")?;
            if json {
                render::print_json(&me);
            } else {
                let groups: Vec<String> = me["groups"]
                    .as_array()
                    .map(|g| g.iter().map(|g| render::cell(&g["name"])).collect())
                    .unwrap_or_default();
                println!(
                    "{} ({})",
                    render::cell(&me["email"]),
                    if me["is_admin"] == true {
                        "admin"
                    } else {
                        "user"
                    }
                );
                println!("server: {}", ctx.client()?.server());
                println!("groups: {}", groups.join(", "));
            }
            Ok(())
        }
        Command::Token(t) => token(ctx, t),
    }
}

fn login(ctx: &Ctx, email: Option<String>, with_token: Option<String>) -> Result<()> {
    let mut saved = Saved::load()?;
    if let Some(server) = &ctx.server {
        saved.server = Some(server.trim_end_matches('/').to_owned());
    }
    let base = Ctx {
        token: None,
        ..ctx.clone()
    };
    let (token, email) = match with_token {
        Some(token) => {
            let me = Ctx {
                token: Some(token.clone()),
                ..base.clone()
            }
            .client()?
            .get("/api/me")?;
            (token, render::cell(&me["email"]))
        }
        None => {
            let email = match email {
                Some(e) => e,
                None => prompt("E-mail")?,
            };
            let password = if std::io::stdin().is_terminal() {
                rpassword::prompt_password("Password: ")?
            } else {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                line.trim_end_matches(['\r', '\n']).to_owned()
            };
            let answer = base.client()?.json(
                Method::POST,
                "/auth/token",
                Some(&json!({"email": email, "password": password})),
            )?;
            let token = answer["access_token"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (token, email)
        }
    };
    if saved.server.is_none() {
        saved.server = Some(base.client()?.server().to_owned());
    }
    saved.token = Some(token);
    saved.email = Some(email.clone());
    saved.save()?;
    eprintln!("Logged in as {email}");
    Ok(())
}

fn token(ctx: &Ctx, cmd: TokenCommand) -> Result<()> {
    let client = ctx.authed()?;
    match cmd {
        TokenCommand::Create { name, days, json } => {
            let created = client.json(
                Method::POST,
                "/api/tokens",
                Some(&json!({"name": name, "expires_in_days": days})),
            )?;
            if json {
                render::print_json(&created);
            } else {
                println!("{}", render::cell(&created["token"]));
                eprintln!(
                    "Token '{}' created (expires: {}). It is shown only now.",
                    render::cell(&created["name"]),
                    created["expires_at"].as_str().unwrap_or("never")
                );
            }
            Ok(())
        }
        TokenCommand::List { json } => {
            let list = client.get("/api/tokens")?;
            if json {
                render::print_json(&list);
                return Ok(());
            }
            let headers =
                ["ID", "NAME", "PREFIX", "EXPIRES", "LAST USED", "STATUS"].map(String::from);
            let rows: Vec<Vec<String>> = list
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    let status = token_status(t);
                    vec![
                        render::cell(&t["id"]),
                        render::cell(&t["name"]),
                        render::cell(&t["prefix"]),
                        t["expires_at"].as_str().unwrap_or("never").to_owned(),
                        render::cell(&t["last_used_at"]),
                        status.to_owned(),
                    ]
                })
                .collect();
            render::table(&headers, &rows);
            Ok(())
        }
        TokenCommand::Revoke { which } => {
            let list = client.get("/api/tokens")?;
            let found: Vec<&Value> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["id"] == which.as_str() || t["name"] == which.as_str())
                .collect();
            let id = match found.as_slice() {
                [one] => render::cell(&one["id"]),
                [] => {
                    return Err(CliError::new(
                        Exit::Denied,
                        format!("Error: no token '{which}'"),
                    ))
                }
                _ => {
                    return Err(CliError::usage(format!(
                        "Error: several tokens are named '{which}'; revoke by id"
                    )))
                }
            };
            client.json(Method::DELETE, &format!("/api/tokens/{}", seg(&id)), None)?;
            eprintln!("Token {id} revoked");
            Ok(())
        }
    }
}

/// `active` or `revoked`, as token listings print it.
pub(super) fn token_status(t: &Value) -> &'static str {
    if t["revoked_at"].is_null() {
        "active"
    } else {
        "revoked"
    }
}
