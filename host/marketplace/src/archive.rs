//! Unpacking a submitted plugin directory (tar, optionally gzip-compressed). The archive is
//! read twice: first its headers only, refusing it before anything is written when its
//! entries would unpack past the size or count limit (a compression bomb) or name a path
//! that is absolute, climbs with `..`, or is a link or device; then it is unpacked, with the
//! bytes counted again in case a header lied.

use std::io::Read;
use std::path::Path;

/// Most bytes a submitted plugin unpacks to.
pub const MAX_UNPACKED_BYTES: u64 = 50 << 20;
/// Most entries in one.
pub const MAX_ENTRIES: usize = 5_000;

fn reader(bytes: &[u8]) -> Box<dyn Read + '_> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    }
}

/// Checks an archive without unpacking it: `(entries, unpacked bytes)` or why it is refused.
pub fn inspect(bytes: &[u8]) -> Result<(usize, u64), String> {
    if bytes.starts_with(b"PK\x03\x04") {
        return Err(
            "zip archives are not accepted; send a tar or tar.gz of the plugin directory".into(),
        );
    }
    let mut archive = tar::Archive::new(reader(bytes));
    let (mut count, mut total) = (0usize, 0u64);
    for entry in archive
        .entries()
        .map_err(|e| format!("not a tar archive: {e}"))?
    {
        let entry = entry.map_err(|e| format!("not a tar archive: {e}"))?;
        count += 1;
        total = total.saturating_add(entry.header().size().unwrap_or(u64::MAX));
        if count > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        if total > MAX_UNPACKED_BYTES {
            return Err(format!(
                "it unpacks to more than {MAX_UNPACKED_BYTES} bytes"
            ));
        }
        let path = entry.path().map_err(|e| format!("an entry's path: {e}"))?;
        if !crate::layout::is_contained(&path) {
            return Err(format!(
                "entry '{}' leaves the plugin directory",
                path.display()
            ));
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(format!(
                "entry '{}' is not a plain file or directory (links and devices are refused)",
                path.display()
            ));
        }
    }
    if count == 0 {
        return Err("the archive is empty".into());
    }
    Ok((count, total))
}

/// Unpacks an archive [`inspect`] accepted into `dest` (created).
pub fn unpack(bytes: &[u8], dest: &Path) -> Result<(), String> {
    inspect(bytes)?;
    std::fs::create_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let mut archive = tar::Archive::new(reader(bytes));
    let mut written: u64 = 0;
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let target = dest.join(&path);
        if entry.header().entry_type().is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let mut out = std::fs::File::create(&target).map_err(|e| e.to_string())?;
        let mut limited = (&mut entry).take(MAX_UNPACKED_BYTES - written + 1);
        written += std::io::copy(&mut limited, &mut out).map_err(|e| e.to_string())?;
        if written > MAX_UNPACKED_BYTES {
            return Err(format!(
                "it unpacks to more than {MAX_UNPACKED_BYTES} bytes"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // Written raw so a hostile path is kept as it is.
            let name = path.as_bytes();
            h.as_old_mut().name[..name.len()].copy_from_slice(name);
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn hostile_archives_are_refused_before_unpacking() {
        let ok = tar_of(&[("skills/a/SKILL.md", b"---\nname: a\n---\n")]);
        assert_eq!(inspect(&ok).unwrap().0, 1);
        let up = tar_of(&[("../evil", b"x")]);
        assert!(inspect(&up).unwrap_err().contains("leaves"));
        let abs = tar_of(&[("/etc/evil", b"x")]);
        assert!(inspect(&abs).unwrap_err().contains("leaves"));
        assert!(inspect(b"PK\x03\x04rest").unwrap_err().contains("zip"));
        assert!(inspect(b"garbage that is not tar").is_err());
    }

    #[test]
    fn a_compression_bomb_is_refused_by_its_declared_size() {
        let big = vec![0u8; (MAX_UNPACKED_BYTES + 1) as usize];
        let bomb = tar_of(&[("big.bin", &big)]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &bomb).unwrap();
        let gz = gz.finish().unwrap();
        assert!(gz.len() < 200_000, "{}", gz.len());
        assert!(inspect(&gz).unwrap_err().contains("unpacks to more"));
    }
}
