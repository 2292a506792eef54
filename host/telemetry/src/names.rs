//! Names from users that become paths: a session file's name and its owner's directory.
//!
//! Both are checked here and nowhere else, so no name from a request reaches the disk
//! without passing one of these two doors.

use std::fmt;

use svc_core::Error;

/// Longest file name kept, `.jsonl` included (ext4 and most file systems allow 255 bytes).
pub const MAX_NAME_BYTES: usize = 200;

/// A session file name that is safe as one path component: `[A-Za-z0-9._-]`, not starting
/// with a dot, ending in `.jsonl`, at most [`MAX_NAME_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionName(String);

impl SessionName {
    /// Sanitizes an uploaded name: a client's path is cut to its last component, and any
    /// character outside `[A-Za-z0-9._-]` becomes `_`. Refused (422, saying why): a NUL or
    /// other control character, an empty or all-dots name, a name not ending in `.jsonl`, a
    /// name longer than [`MAX_NAME_BYTES`].
    pub fn sanitize(raw: &str) -> Result<Self, Error> {
        if raw.chars().any(char::is_control) {
            return Err(Error::invalid(
                "The session file name holds a NUL or control character",
            ));
        }
        let base = raw.rsplit(['/', '\\']).next().unwrap_or_default();
        let cleaned: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let cleaned = cleaned.trim_start_matches('.');
        let Some(stem) = cleaned.strip_suffix(".jsonl") else {
            return Err(Error::invalid(format!(
                "A session file name must end in .jsonl (got '{}')",
                truncate(raw, 80)
            )));
        };
        if stem.trim_matches('.').is_empty() {
            return Err(Error::invalid(
                "The session file name is empty before .jsonl",
            ));
        }
        if cleaned.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(format!(
                "The session file name is {} characters; at most {MAX_NAME_BYTES} are allowed",
                cleaned.len()
            )));
        }
        Ok(Self(cleaned.to_owned()))
    }

    /// A name already on disk, if it passes the same rules unchanged (the scanner ignores
    /// anything else, such as temporary files).
    pub fn existing(name: &str) -> Option<Self> {
        Self::sanitize(name).ok().filter(|n| n.0 == name)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A user's directory under the session root: their user id, which the store generates
/// (a UUID), checked anyway because it becomes a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserDir(String);

impl UserDir {
    /// The directory for a user id; refused unless it is `[A-Za-z0-9_-]`, 1–128 bytes.
    pub fn for_user(user_id: &str) -> Result<Self, Error> {
        Self::existing(user_id)
            .ok_or_else(|| Error::internal(format!("unsafe user id for a directory: {user_id:?}")))
    }

    /// A directory found on disk, if its name passes the same rule.
    pub fn existing(name: &str) -> Option<Self> {
        let ok = (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        ok.then(|| Self(name.to_owned()))
    }

    /// The directory name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key of a session file in the store: `<user dir>/<file name>`.
pub fn session_key(dir: &UserDir, name: &SessionName) -> String {
    format!("{dir}/{name}")
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_to_one_safe_component() {
        let ok = |raw: &str| SessionName::sanitize(raw).unwrap().0;
        assert_eq!(ok("abc-123.jsonl"), "abc-123.jsonl");
        assert_eq!(ok("../../etc/x.jsonl"), "x.jsonl");
        assert_eq!(ok("C:\\Users\\a\\s 1.jsonl"), "s_1.jsonl");
        assert_eq!(ok("..hidden.jsonl"), "hidden.jsonl");
        assert_eq!(ok("sé ssion.jsonl"), "s__ssion.jsonl");
        for bad in [
            "a\0b.jsonl",
            "x.json",
            "x",
            "",
            ".jsonl",
            "...jsonl",
            "../",
            "a/..",
            "a\nb.jsonl",
        ] {
            assert!(SessionName::sanitize(bad).is_err(), "{bad:?}");
        }
        let long = format!("{}.jsonl", "a".repeat(300));
        let e = SessionName::sanitize(&long).unwrap_err();
        assert!(e.to_string().contains("at most 200"), "{e}");
        assert_eq!(
            SessionName::existing("x.jsonl").unwrap().as_str(),
            "x.jsonl"
        );
        assert!(SessionName::existing(".x.jsonl.upload-1.tmp").is_none());
        assert!(SessionName::existing("a b.jsonl").is_none());
    }

    #[test]
    fn user_dirs_are_plain_ids() {
        assert!(UserDir::for_user("0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b").is_ok());
        for bad in ["", "..", "a/b", "a.b", "x\0", &"a".repeat(129)] {
            assert!(UserDir::existing(bad).is_none(), "{bad:?}");
        }
    }
}
