//! Exit codes and the one error type every command returns.

use std::fmt;

/// Documented exit codes (`svc --help` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Not a failure: the reader of standard output went away (`svc query … | head`), which
    /// ends the command normally and quietly.
    OutputClosed = 0,
    /// Bad usage: a wrong flag or value, no server configured, a client older than the
    /// server accepts.
    Usage = 2,
    /// Too many requests or over a quota (429).
    RateLimited = 3,
    /// Partly done: what could be done was, and the rest was left out (`svc pull` over
    /// tables that have no data yet; a file output cut at the server's row cap).
    Partial = 4,
    /// The server failed or could not be reached.
    Server = 5,
    /// A local file exists and `--force` was not given (it is left untouched).
    Exists = 6,
    /// Not logged in, or the token was refused (401).
    Auth = 7,
    /// Forbidden or not found (403, 404).
    Denied = 8,
    /// Anything else the server refused (400, 409, 422, …).
    Other = 9,
}

impl Exit {
    /// The code for an HTTP error status.
    pub fn of_status(status: u16) -> Self {
        match status {
            401 => Self::Auth,
            403 | 404 => Self::Denied,
            429 => Self::RateLimited,
            s if s >= 500 => Self::Server,
            _ => Self::Other,
        }
    }
}

/// What a failed command prints (on stderr) and exits with.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub exit: Exit,
    /// One or more lines.
    pub message: String,
    /// A next step, printed after the message.
    pub hint: Option<String>,
    /// The server's machine-readable error name (`detail.error`), when it sent one.
    pub code: Option<String>,
}

impl CliError {
    /// An error with a code and a message.
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            hint: None,
            code: None,
        }
    }

    /// Standard output was closed by its reader: a normal, quiet end.
    pub fn output_closed() -> Self {
        Self::new(Exit::OutputClosed, "")
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Self::output_closed();
        }
        Self::new(Exit::Other, format!("Error: {e}"))
    }
}

/// What commands return.
pub type Result<T> = std::result::Result<T, CliError>;
