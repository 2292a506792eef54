//! Floors for the pipeline: what reading the corpus and keeping its events cost before svc
//! does anything of its own. The issue asks for ≥ 5× ccusage; these say how fast any
//! pipeline that must do the same could go on this machine, so a miss can be told from a
//! ceiling.
//!
//! - reading: every file read into memory, hashed (xxh3) and split at newlines — what the
//!   incremental skip needs, and less than any extraction;
//! - validating: every line read as JSON and thrown away (serde_json, the fastest validating
//!   Rust reader measured here, ahead of sonic-rs and simd-json), because the issue requires
//!   malformed lines to be counted and reported, and only reading a whole line as JSON tells
//!   a good line from a bad one;
//! - simdjson: the same validation by the fastest JSON parser known (C++, SIMD), when
//!   Debian's `libsimdjson-dev` and g++ are installed (`simdjson_lines.cpp` beside this file);
//! - writing: the events a run extracted, written once more as one segment, because a
//!   pipeline that extracts events must also keep them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Every session file under `root`, in a stable order.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Threads the floors use: every core, as the pipeline does.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// MB/s of `per_file` over `files` shared out to `threads` threads, each with a reused
/// buffer, files taken in turn.
fn measure(files: &[PathBuf], threads: usize, per_file: fn(&[u8]) -> u64) -> f64 {
    let (next, bytes) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let (mut buf, mut seen) = (Vec::new(), 0u64);
                while let Some(path) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    buf.clear();
                    let mut file = std::fs::File::open(path).unwrap();
                    std::io::Read::read_to_end(&mut file, &mut buf).unwrap();
                    bytes.fetch_add(buf.len(), Ordering::Relaxed);
                    seen ^= per_file(&buf);
                }
                std::hint::black_box(seen);
            });
        }
    });
    bytes.load(Ordering::Relaxed) as f64 / 1e6 / started.elapsed().as_secs_f64()
}

/// MB/s of reading, hashing and splitting at newlines.
pub fn reading(files: &[PathBuf]) -> f64 {
    measure(files, threads(), |buf| {
        xxhash_rust::xxh3::xxh3_64(buf) ^ memchr::memchr_iter(b'\n', buf).count() as u64
    })
}

/// MB/s of reading and validating every line as JSON.
pub fn validating(files: &[PathBuf]) -> f64 {
    measure(files, threads(), |buf| {
        buf.split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .filter(|line| serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err())
            .count() as u64
    })
}

/// The simdjson program built once into `dir`, or why not.
pub fn build_simdjson(dir: &Path) -> Result<PathBuf, String> {
    if !Path::new("/usr/include/simdjson.h").exists() {
        return Err("libsimdjson-dev is not installed".into());
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/floor/simdjson_lines.cpp");
    let bin = dir.join("simdjson_lines");
    let out = std::process::Command::new("g++")
        .args(["-O3", "-march=native", "-std=c++17"])
        .arg(&source)
        .arg("-o")
        .arg(&bin)
        .args(["-lsimdjson", "-lpthread"])
        .output()
        .map_err(|e| format!("g++: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(bin)
}

/// MB/s of simdjson validating every line, and the malformed lines it found.
pub fn simdjson(bin: &Path, files: &[PathBuf]) -> Option<(f64, u64)> {
    let out = std::process::Command::new(bin)
        .arg(threads().to_string())
        .args(files)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    let rate = fields.next()?.parse().ok()?;
    let malformed = fields.nth(1)?.parse().ok()?;
    Some((rate, malformed))
}

/// Seconds to write every event the run at `data` committed once more, as one segment on
/// one thread (svc's cheapest event encoding, LZ4 without dictionaries for the ids), and
/// how many events that was. Each session file's segment is read untimed and its batches
/// written timed, so only the write is counted, and memory holds one file's events at a
/// time: what any pipeline that keeps its events pays on top of reading the lines.
pub fn writing(data: &Path, scratch: &Path) -> (f64, usize) {
    let segments = svc_telemetry::EventSegments::new(data);
    let mut out = svc_telemetry::EventSegments::new(scratch)
        .create("floor-write.parquet")
        .unwrap();
    let (mut secs, mut rows) = (0.0, 0);
    for entry in std::fs::read_dir(data.join(svc_driver_internal::events::DIR)).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        // Packs hold the same events again, gathered for reads.
        if name.starts_with("pack-") {
            continue;
        }
        for batch in segments.read(&name).unwrap() {
            rows += batch.num_rows();
            let started = Instant::now();
            out.write(&batch).unwrap();
            secs += started.elapsed().as_secs_f64();
        }
    }
    let started = Instant::now();
    out.commit().unwrap();
    (secs + started.elapsed().as_secs_f64(), rows)
}
