//! Letting go of start-up's code once the server is ready.
//!
//! Starting a server runs code that never runs again: argument parsing, configuration, the
//! store's migrations, route tables. Each page of the binary it touches is mapped with its
//! neighbours (the kernel maps up to 64 KiB of cached file around each fault), so start-up
//! left about 19 MiB of the binary's code mapped, and counted in the resident set, on a
//! server that then idled on a few timers.
//!
//! Once ready, the server drops its mappings of those pages (`MADV_DONTNEED` on the parts of
//! its own binary it has never written). The pages stay in the page cache: code that runs
//! again maps them back with a minor fault, so a request pays nothing after its first pass.
//! What this changes is what the process has mapped, which is what RSS counts. It does not
//! free page cache, so a container whose memory limit counts page cache sees no difference.
//!
//! Only mappings with no anonymous pages are dropped: a page the loader wrote (relocated
//! data) would come back as the unrelocated file, so any mapping holding one is left alone.
//! The parts are read from `/proc/self/smaps`; on a system without it, or for a binary whose
//! path has a space or was replaced on disk (smaps names it otherwise), nothing is done.
//!
//! One of the two places in this package where the workspace's `unsafe_code = deny` is
//! lifted (the other is the server binary's allocator): `madvise` is a C call.
#![allow(unsafe_code)]

/// A part of the binary's mapping: its address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    start: usize,
    end: usize,
}

/// Drops this process's mappings of its binary's never-written pages; the bytes it let go
/// of (what the parts held resident).
pub fn release() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 0;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (part, resident) in clean_parts(&smaps, &exe.to_string_lossy()) {
        // SAFETY: the range is a whole mapping of the binary's file that holds no anonymous
        // page, so every page in it is the file's own bytes: dropping the mapping's pages
        // loses nothing, and the next access maps the same bytes back from the page cache.
        let done = unsafe {
            madvise(
                part.start as *mut std::ffi::c_void,
                part.end - part.start,
                MADV_DONTNEED,
            )
        };
        if done == 0 {
            released += resident;
        }
    }
    released
}

const MADV_DONTNEED: std::ffi::c_int = 4;

extern "C" {
    fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: std::ffi::c_int)
        -> std::ffi::c_int;
}

/// The mappings of `exe` in `smaps` that are not writable and hold no anonymous page, with
/// the bytes each holds resident.
fn clean_parts(smaps: &str, exe: &str) -> Vec<(Part, usize)> {
    mappings(smaps)
        .into_iter()
        .filter(|m| m.path == exe && !m.writable && m.anonymous == Some(0))
        .map(|m| (m.part, m.resident))
        .collect()
}

/// One mapping as `smaps` describes it.
struct Mapping<'a> {
    part: Part,
    writable: bool,
    path: &'a str,
    /// `Rss` and `Anonymous`, in bytes. A mapping whose anonymous bytes were not read is
    /// never taken for clean.
    resident: usize,
    anonymous: Option<usize>,
}

/// Every mapping in `smaps`: a header line (`start-end perms offset dev inode path`), then
/// `Field: value` lines. A header that cannot be read ends up in no mapping, and its fields
/// are skipped with it.
fn mappings(smaps: &str) -> Vec<Mapping<'_>> {
    let mut mappings: Vec<Mapping<'_>> = Vec::new();
    let mut in_mapping = false;
    for line in smaps.lines() {
        // Field names have no space; a header's text before its first colon (in `dev`) does.
        if let Some((field, value)) = line.split_once(':').filter(|(f, _)| !f.contains(' ')) {
            let bytes = || {
                let kib = value.trim().trim_end_matches(" kB").parse::<usize>();
                kib.ok().map(|kib| kib * 1024)
            };
            match (in_mapping, mappings.last_mut(), field) {
                (true, Some(m), "Rss") => m.resident = bytes().unwrap_or(0),
                (true, Some(m), "Anonymous") => m.anonymous = bytes(),
                _ => {}
            }
            continue;
        }
        let header = header(line);
        in_mapping = header.is_some();
        mappings.extend(header);
    }
    mappings
}

/// A mapping's header line, read; None when it is not one.
fn header(line: &str) -> Option<Mapping<'_>> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    Some(Mapping {
        part: Part {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
        },
        writable: perms.contains('w'),
        path: fields.nth(3).unwrap_or_default(),
        resident: 0,
        anonymous: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55cf00000000-55cf00010000 r--p 00000000 fe:01 42 /opt/svc/svc-server
Size:                 64 kB
Rss:                  40 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
55cf00010000-55cf00030000 r-xp 00010000 fe:01 42 /opt/svc/svc-server
Size:                128 kB
Rss:                 96 kB
Anonymous:             0 kB
55cf00030000-55cf00038000 r--p 00030000 fe:01 42 /opt/svc/svc-server
Size:                 32 kB
Rss:                 32 kB
Anonymous:            28 kB
55cf00038000-55cf00039000 rw-p 00038000 fe:01 42 /opt/svc/svc-server
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
7f0000000000-7f0000010000 r-xp 00000000 fe:01 7 /usr/lib/libc.so.6
Size:                 64 kB
Rss:                 64 kB
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
Size:                132 kB
Rss:                  88 kB
Anonymous:            88 kB
";

    #[test]
    fn only_the_binarys_never_written_mappings_are_released() {
        let parts = clean_parts(SMAPS, "/opt/svc/svc-server");
        assert_eq!(
            parts,
            vec![
                (
                    Part {
                        start: 0x55cf_0000_0000,
                        end: 0x55cf_0001_0000
                    },
                    40 * 1024
                ),
                (
                    Part {
                        start: 0x55cf_0001_0000,
                        end: 0x55cf_0003_0000
                    },
                    96 * 1024
                ),
            ],
            "not the relocated data (anonymous pages), not the writable data, not libc"
        );
    }

    #[test]
    fn the_code_released_comes_back_when_it_runs() {
        // This test's own binary: drop its code, then run code again.
        let released = release();
        assert!(released > 0, "a running binary has code resident");
        let sum: u64 = (1..=1000u64).map(|n| n * n).sum();
        assert_eq!(sum, 333_833_500);
    }
}
