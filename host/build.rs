//! Link settings for `svc-server`.
//!
//! Packed relative relocations (`-z pack-relative-relocs`, DT_RELR). The server is a
//! position-independent binary with about 400,000 relative relocations (vtables, static
//! tables of pointers). As RELA entries they take 24 bytes each, about 10 MB that the loader
//! reads once at start and that then stay resident as file pages. Packed, they are a bitmap
//! of a few hundred kilobytes. That lowers idle memory, start-up time and the binary's size.
//! The loader must understand DT_RELR (glibc 2.36 or later), so the flag is added only for a
//! native glibc build whose own glibc is that recent.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if native && glibc && glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build machine's glibc, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}
