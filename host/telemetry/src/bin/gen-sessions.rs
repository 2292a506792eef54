//! Writes a deterministic corpus of Claude-Code-style session files, for benchmarks and for
//! trying the pipeline by hand:
//!
//!   cargo run -p svc-telemetry --bin gen-sessions -- OUT_DIR [--files N] [--mb MB] [--seed S]
//!
//! `OUT_DIR/session-00000.jsonl` … together about `--mb` megabytes (default: 1 file, 10 MB).
//! Upload them with `svc sessions push OUT_DIR`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use svc_telemetry::corpus::{self, Rng};

const USAGE: &str = "usage: gen-sessions OUT_DIR [--files N] [--mb MB] [--seed S]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-sessions: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut out, mut files, mut mb, mut seed) = (None, 1u64, 10u64, 20_261_124u64);
    while let Some(arg) = args.next() {
        let mut number = |flag: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{flag} takes a whole number"))
        };
        match arg.as_str() {
            "--files" => files = number("--files")?.max(1),
            "--mb" => mb = number("--mb")?,
            "--seed" => seed = number("--seed")?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag}")),
            dir if out.is_none() => out = Some(PathBuf::from(dir)),
            extra => return Err(format!("unexpected argument {extra}")),
        }
    }
    let out = out.ok_or("OUT_DIR is required")?;
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut rng = Rng::new(seed);
    let mut total = corpus::Generated::default();
    for i in 0..files {
        let path = out.join(format!("session-{i:05}.jsonl"));
        let write = |path: &PathBuf, rng: &mut Rng| -> std::io::Result<corpus::Generated> {
            let mut w = BufWriter::new(std::fs::File::create(path)?);
            let g = corpus::file(&mut w, rng, i * 1000, mb * 1_000_000 / files)?;
            w.flush()?;
            Ok(g)
        };
        total += write(&path, &mut rng).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!(
        "{files} files, {} bytes, {} lines: {} events and {} malformed lines expected",
        total.bytes, total.lines, total.events, total.malformed
    );
    Ok(())
}
